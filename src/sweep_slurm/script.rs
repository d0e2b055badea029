//! The batch script of a sweep's job array.
//!
//! ```text
//! #!/bin/bash
//! #SBATCH --job-name=<sweep-id>                   one name for every task of the sweep
//! #SBATCH --array=0-3,5%2                         the members to run, %K at once
//! #SBATCH --output=<sweep dir>/slurm-%A_%a.out    each task's console, appended on requeue
//! #SBATCH --requeue  --signal=B:USR1@300          requeueable; a warning before the time limit
//! #SBATCH --partition= --time= --cpus-per-task= --mem= --gres=   when set
//! #SBATCH <sbatch_args>...                        verbatim, last
//! cd <the directory rlx sweep ran in>; <setup>
//! case $SLURM_ARRAY_TASK_ID in 0) args=(run SPEC KEY=VALUE...) ;; ... esac
//! rlx "${args[@]}" in the background; the shell waits for it and handles signals
//! ```
//!
//! Signals. When Slurm cancels, preempts, requeues or times out a task, it sends SIGTERM to
//! every process of the task, `rlx run` included, which stops at the step boundary and
//! checkpoints as it does on a terminal's Ctrl-C (a second signal would make it quit at once,
//! so the shell only notes its own SIGTERM and passes nothing on). The time-limit warning,
//! `--signal=B:USR1@S`, reaches the shell alone: it sends `rlx run` one SIGTERM and, once the
//! run has checkpointed (exit 130), requeues its own task, which resumes the run in a new
//! allocation. `scancel --batch --signal=USR1 JOB_INDEX` does the same by hand.

use std::fmt::Write as _;
use std::path::Path;

use super::Options;

/// One array task: a member of the sweep.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Task {
    /// The member's index in the sweep, and so its array index.
    pub index: usize,
    /// Its run id (for the task's log lines).
    pub run_id: String,
    /// The arguments of `rlx`: `run SPEC KEY=VALUE...`.
    pub args: Vec<String>,
}

/// What the script is made from.
#[derive(Debug, Clone)]
pub(crate) struct Script<'a> {
    /// The sweep id: the job name.
    pub sweep_id: &'a str,
    /// The sweep directory, absolute: the tasks' output files go there.
    pub sweep_dir: &'a Path,
    /// The directory `rlx sweep` ran in, absolute: the tasks run there, so relative paths in
    /// the spec's `log.root` and in overrides mean what they meant to `rlx sweep`.
    pub workdir: &'a Path,
    /// The tasks to run (finished members are not among them).
    pub tasks: &'a [Task],
    /// The settings.
    pub options: &'a Options,
}

/// Slurm's `--array` value for `indices` (sorted, distinct): runs of consecutive indices as
/// `a-b`, then `%K` when at most `max_parallel` tasks may run at once.
pub(crate) fn array_spec(indices: &[usize], max_parallel: Option<u32>) -> String {
    let mut parts: Vec<String> = vec![];
    let mut i = 0;
    while i < indices.len() {
        let mut j = i;
        while j + 1 < indices.len() && indices[j + 1] == indices[j] + 1 {
            j += 1;
        }
        parts.push(if j > i { format!("{}-{}", indices[i], indices[j]) } else { indices[i].to_string() });
        i = j + 1;
    }
    let mut s = parts.join(",");
    if let Some(k) = max_parallel {
        let _ = write!(s, "%{k}");
    }
    s
}

/// `s` as one shell word: unchanged when it holds only safe characters, single-quoted otherwise.
pub(crate) fn sh_quote(s: &str) -> String {
    let safe = !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b"@%+=:,./_-".contains(&b));
    if safe { s.to_string() } else { format!("'{}'", s.replace('\'', r"'\''")) }
}

/// The value of an `#SBATCH` option: sbatch reads these lines itself, splitting on spaces
/// unless the value is double-quoted.
fn sbatch_value(s: &str) -> String {
    if s.contains([' ', '\t']) { format!("\"{}\"", s.replace('"', "\\\"")) } else { s.to_string() }
}

/// The batch script.
pub(crate) fn render(s: &Script<'_>) -> String {
    let o = s.options;
    let mut out = String::new();
    let mut line = |l: String| {
        out.push_str(&l);
        out.push('\n');
    };
    line("#!/bin/bash".into());
    line(format!("# rlx sweep {}: one array task per member, each `rlx run` of one run (written by rlx sweep --launcher slurm).", s.sweep_id));
    line(format!("#SBATCH --job-name={}", sbatch_value(s.sweep_id)));
    let indices: Vec<usize> = s.tasks.iter().map(|t| t.index).collect();
    line(format!("#SBATCH --array={}", array_spec(&indices, o.max_parallel)));
    line(format!("#SBATCH --output={}", sbatch_value(&s.sweep_dir.join("slurm-%A_%a.out").display().to_string())));
    line("#SBATCH --open-mode=append".into());
    line("#SBATCH --requeue".into());
    if o.stop_before_s > 0 {
        line(format!("#SBATCH --signal=B:USR1@{}", o.stop_before_s));
    }
    for (flag, value) in [("partition", &o.partition), ("time", &o.time), ("mem", &o.mem), ("gres", &o.gres)] {
        if let Some(v) = value {
            line(format!("#SBATCH --{flag}={}", sbatch_value(v)));
        }
    }
    if let Some(c) = o.cpus_per_task {
        line(format!("#SBATCH --cpus-per-task={c}"));
    }
    for a in &o.sbatch_args {
        line(format!("#SBATCH {a}"));
    }
    line(String::new());
    line(format!("cd {} || exit 2", sh_quote(&s.workdir.display().to_string())));
    if let Some(setup) = o.setup.as_deref().filter(|t| !t.trim().is_empty()) {
        line("# setup (sweep.slurm.setup, --setup)".into());
        line(setup.trim_end().to_string());
    }
    line(String::new());
    line("case \"$SLURM_ARRAY_TASK_ID\" in".into());
    for t in s.tasks {
        let args: Vec<String> = t.args.iter().map(|a| sh_quote(a)).collect();
        line(format!("  {}) run_id={}; args=({}) ;;", t.index, sh_quote(&t.run_id), args.join(" ")));
    }
    line("  *) echo \"rlx sweep: no member at array index $SLURM_ARRAY_TASK_ID\" >&2; exit 2 ;;".into());
    line("esac".into());
    line(format!(
        "echo \"rlx sweep {}: member $SLURM_ARRAY_TASK_ID ($run_id), task ${{SLURM_ARRAY_JOB_ID}}_$SLURM_ARRAY_TASK_ID, restart ${{SLURM_RESTART_COUNT:-0}}\" >&2",
        s.sweep_id
    ));
    line(String::new());
    line("# Slurm's SIGTERM (cancel, preemption, time limit) reaches rlx run itself, which stops at the".into());
    line("# step boundary; this shell only notes its own. The time-limit warning (USR1) reaches this".into());
    line("# shell alone: it stops rlx run the same way, then requeues the task to resume the run.".into());
    line("requeue=0".into());
    line("trap 'requeue=1; kill -TERM \"$child\" 2>/dev/null' USR1".into());
    line("trap ':' TERM".into());
    line(format!("{} \"${{args[@]}}\" &", sh_quote(&o.rlx)));
    line("child=$!".into());
    line("while kill -0 \"$child\" 2>/dev/null; do wait \"$child\"; done".into());
    line("wait \"$child\"; code=$?".into());
    line("if [ \"$requeue\" = 1 ] && [ \"$code\" = 130 ]; then".into());
    line("  echo \"rlx sweep: $run_id stopped before the time limit; requeueing its task\" >&2".into());
    line("  scontrol requeue \"${SLURM_ARRAY_JOB_ID}_${SLURM_ARRAY_TASK_ID}\"".into());
    line("fi".into());
    line("exit \"$code\"".into());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn array_specs() {
        assert_eq!(array_spec(&[0, 1, 2, 3], None), "0-3");
        assert_eq!(array_spec(&[0, 2, 3, 4, 7], Some(2)), "0,2-4,7%2");
        assert_eq!(array_spec(&[5], None), "5");
    }

    #[test]
    fn quoting() {
        assert_eq!(sh_quote("optimizer.learning_rate=1e-5"), "optimizer.learning_rate=1e-5");
        assert_eq!(sh_quote("sampling.stop=[\"```\"]"), "'sampling.stop=[\"```\"]'");
        assert_eq!(sh_quote("name=it's"), r"'name=it'\''s'");
        assert_eq!(sh_quote(""), "''");
        assert_eq!(sbatch_value("a b"), "\"a b\"");
    }

    fn options() -> Options {
        Options { stop_before_s: 300, rlx: "/opt/rlx/bin/rlx".into(), ..Options::default() }
    }

    fn tasks() -> Vec<Task> {
        vec![
            Task { index: 0, run_id: "q-1".into(), args: vec!["run".into(), "/w/q.yaml".into(), "optimizer.learning_rate=1e-5".into()] },
            Task { index: 2, run_id: "q-3".into(), args: vec!["run".into(), "/w/q.yaml".into(), "optimizer.learning_rate=4e-5".into()] },
        ]
    }

    #[test]
    fn defaults_set_only_what_rlx_needs() {
        let (o, t) = (options(), tasks());
        let text = render(&Script { sweep_id: "q-sweep-ab", sweep_dir: Path::new("/w/sweeps/q-sweep-ab"), workdir: Path::new("/w"), tasks: &t, options: &o });
        let sbatch: Vec<&str> = text.lines().filter(|l| l.starts_with("#SBATCH")).collect();
        assert_eq!(
            sbatch,
            vec![
                "#SBATCH --job-name=q-sweep-ab",
                "#SBATCH --array=0,2",
                "#SBATCH --output=/w/sweeps/q-sweep-ab/slurm-%A_%a.out",
                "#SBATCH --open-mode=append",
                "#SBATCH --requeue",
                "#SBATCH --signal=B:USR1@300",
            ]
        );
        assert!(text.contains("  0) run_id=q-1; args=(run /w/q.yaml optimizer.learning_rate=1e-5) ;;"), "{text}");
        assert!(text.contains("  2) run_id=q-3;"), "{text}");
        assert!(text.contains("/opt/rlx/bin/rlx \"${args[@]}\" &"), "{text}");
        assert!(text.contains("cd /w || exit 2"));
        assert!(!text.contains("setup"));
    }

    #[test]
    fn every_option_maps_to_its_line() {
        let o = Options {
            partition: Some("gpu".into()),
            time: Some("4:00:00".into()),
            cpus_per_task: Some(8),
            mem: Some("32G".into()),
            gres: Some("gpu:1".into()),
            sbatch_args: vec!["--account=proj".into(), "--qos=high".into()],
            setup: Some("module load cuda\nsource ~/venv/bin/activate\n".into()),
            stop_before_s: 0,
            max_parallel: Some(4),
            rlx: "rlx".into(),
        };
        let t = tasks();
        let text = render(&Script { sweep_id: "q", sweep_dir: Path::new("/w/my sweeps/q"), workdir: Path::new("/w/a b"), tasks: &t, options: &o });
        for l in [
            "#SBATCH --array=0,2%4",
            "#SBATCH --output=\"/w/my sweeps/q/slurm-%A_%a.out\"",
            "#SBATCH --partition=gpu",
            "#SBATCH --time=4:00:00",
            "#SBATCH --mem=32G",
            "#SBATCH --gres=gpu:1",
            "#SBATCH --cpus-per-task=8",
            "#SBATCH --account=proj",
            "#SBATCH --qos=high",
            "cd '/w/a b' || exit 2",
            "module load cuda",
            "source ~/venv/bin/activate",
            "rlx \"${args[@]}\" &",
        ] {
            assert!(text.lines().any(|x| x == l), "missing `{l}` in\n{text}");
        }
        assert!(!text.contains("--signal"), "0 turns the warning off");
        // The extra arguments come after rlx's own, so they win where sbatch lets the last one.
        let pos = |needle: &str| text.find(needle).unwrap();
        assert!(pos("--qos=high") > pos("--gres=gpu:1"));
        assert!(pos("module load cuda") < pos("case \"$SLURM_ARRAY_TASK_ID\""));
    }
}
