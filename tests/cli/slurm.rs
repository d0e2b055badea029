//! `rlx sweep --launcher slurm` against a real single-node Slurm (Debian's `slurm-wlm` and
//! `munge`), started here without systemd: `munged`, `slurmctld -D` and `slurmd -D` with a
//! generated `slurm.conf` (`proctrack/linuxproc`, `task/none`, one node with this machine's CPUs,
//! every file and port of its own in a temp directory). The members are real `rlx run`s of the
//! tiny random model of `engine.rs`.
//!
//! Where Slurm is missing or cannot start, the cluster tests say `SKIPPED` with the reason; the
//! batch script, the spec's `sweep` section and the errors without Slurm are tested regardless.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::{Run, TestContext, jsonl};
use crate::engine::{spec_with, tiny_model};

/// A Slurm cluster of one node, stopped (jobs cancelled, daemons ended) when dropped.
struct Cluster {
    dir: tempfile::TempDir,
    conf: PathBuf,
    daemons: Vec<(&'static str, Child)>,
}

const DAEMONS: [&str; 3] = ["munged", "slurmctld", "slurmd"];
const CLIENTS: [&str; 5] = ["sbatch", "squeue", "scancel", "scontrol", "sinfo"];

fn installed(program: &str) -> bool {
    ["/usr/sbin", "/usr/bin", "/sbin", "/bin", "/usr/local/sbin", "/usr/local/bin"].iter().any(|d| Path::new(d).join(program).exists())
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn tail(path: &Path, n: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

impl Cluster {
    /// Starts the cluster, or says why it cannot (then the caller prints `SKIPPED`).
    fn start() -> Result<Cluster, String> {
        if let Some(missing) = DAEMONS.iter().chain(&CLIENTS).find(|p| !installed(p)) {
            return Err(format!("`{missing}` is not installed (apt-get install slurm-wlm munge)"));
        }
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return Err("slurmd starts jobs as their user, which needs root".into());
        }
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let d = dir.path().to_path_buf();
        // munged wants its socket's directory searchable by all, its key readable by it alone.
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755)).map_err(|e| e.to_string())?;
        let mut key = vec![0u8; 1024];
        std::io::Read::read_exact(&mut std::fs::File::open("/dev/urandom").map_err(|e| e.to_string())?, &mut key).map_err(|e| e.to_string())?;
        std::fs::write(d.join("munge.key"), &key).map_err(|e| e.to_string())?;
        std::fs::set_permissions(d.join("munge.key"), std::fs::Permissions::from_mode(0o400)).map_err(|e| e.to_string())?;
        for sub in ["state", "spool"] {
            std::fs::create_dir_all(d.join(sub)).map_err(|e| e.to_string())?;
        }
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_else(|_| "localhost".into()).trim().split('.').next().unwrap_or("localhost").to_string();
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        let mem_mb = std::fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|m| m.lines().find(|l| l.starts_with("MemTotal:")).and_then(|l| l.split_whitespace().nth(1)).and_then(|k| k.parse::<u64>().ok()))
            .map_or(1024, |kb| kb / 1024 * 9 / 10);
        let (ctl_port, d_port) = (free_port(), free_port());
        let p = |name: &str| d.join(name).display().to_string();
        let conf = format!(
            "ClusterName=rlxtest
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={ctl_port}
SlurmdPort={d_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={sock},cred_expire=5
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/builtin
SchedulerParameters=sched_interval=2
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
StateSaveLocation={state}
SlurmdSpoolDir={spool}
SlurmctldPidFile={ctlpid}
SlurmdPidFile={dpid}
SlurmctldLogFile={ctllog}
SlurmdLogFile={dlog}
SlurmdParameters=config_overrides
ReturnToService=2
MinJobAge=600
KillWait=30
NodeName=rlxnode NodeHostname={host} NodeAddr=127.0.0.1 CPUs={cpus} RealMemory={mem_mb} State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
",
            sock = p("munge.sock"),
            state = p("state"),
            spool = p("spool"),
            ctlpid = p("slurmctld.pid"),
            dpid = p("slurmd.pid"),
            ctllog = p("slurmctld.log"),
            dlog = p("slurmd.log"),
        );
        let conf_path = d.join("slurm.conf");
        std::fs::write(&conf_path, conf).map_err(|e| e.to_string())?;
        let mut cluster = Cluster { dir, conf: conf_path, daemons: vec![] };
        let spawn = |cluster: &mut Cluster, name: &'static str, args: &[String]| -> Result<(), String> {
            let log = std::fs::File::create(cluster.dir.path().join(format!("{name}.out"))).map_err(|e| e.to_string())?;
            let child = Command::new(name)
                .args(args)
                .env("SLURM_CONF", &cluster.conf)
                .stdin(Stdio::null())
                .stdout(log.try_clone().map_err(|e| e.to_string())?)
                .stderr(log)
                .spawn()
                .map_err(|e| format!("cannot start {name}: {e}"))?;
            cluster.daemons.push((name, child));
            Ok(())
        };
        spawn(
            &mut cluster,
            "munged",
            &["-F".into(), format!("--key-file={}", p("munge.key")), format!("--socket={}", p("munge.sock")), format!("--pid-file={}", p("munged.pid")), format!("--log-file={}", p("munged.log")), format!("--seed-file={}", p("munged.seed"))],
        )?;
        cluster.wait_until(Duration::from_secs(10), || d.join("munge.sock").exists()).map_err(|_| format!("munged did not start: {}", tail(&d.join("munged.out"), 5)))?;
        spawn(&mut cluster, "slurmctld", &["-D".into(), "-i".into()])?;
        spawn(&mut cluster, "slurmd", &["-D".into(), "-N".into(), "rlxnode".into()])?;
        let idle = cluster.wait_until(Duration::from_secs(60), || {
            cluster.cmd("sinfo").args(["--noheader", "--Node", "--format", "%T"]).output().is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "idle")
        });
        if idle.is_err() {
            return Err(format!(
                "the node did not come up within 60 s; slurmctld: {}; slurmd: {}",
                tail(&d.join("slurmctld.log"), 5).replace('\n', " | "),
                tail(&d.join("slurmd.log"), 5).replace('\n', " | ")
            ));
        }
        Ok(cluster)
    }

    /// A Slurm command of this cluster.
    fn cmd(&self, program: &str) -> Command {
        let mut c = Command::new(program);
        c.env("SLURM_CONF", &self.conf).stdin(Stdio::null());
        c
    }

    fn wait_until(&self, limit: Duration, mut done: impl FnMut() -> bool) -> Result<(), ()> {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if done() {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        if done() { Ok(()) } else { Err(()) }
    }

    /// The task ids in the queue.
    fn queue(&self) -> Vec<String> {
        let out = self.cmd("squeue").args(["--noheader", "--array", "--format", "%i %T"]).output().unwrap();
        String::from_utf8_lossy(&out.stdout).lines().map(str::to_string).collect()
    }

    /// What to show when a wait failed: the queue and the controller's last lines.
    fn diagnose(&self) -> String {
        format!("queue: {:?}\nslurmctld.log:\n{}", self.queue(), tail(&self.dir.path().join("slurmctld.log"), 15))
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // Jobs first: their processes belong to slurmstepd, which outlives slurmd.
        let ids: Vec<String> = self.queue().iter().filter_map(|l| l.split(['_', ' ']).next().map(str::to_string)).collect();
        if !ids.is_empty() {
            let _ = self.cmd("scancel").args(&ids).status();
            let _ = self.wait_until(Duration::from_secs(45), || self.queue().is_empty());
        }
        for (_, child) in self.daemons.iter_mut().rev() {
            // SAFETY: kill(2) on our own child's pid.
            unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline && child.try_wait().ok().flatten().is_none() {
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

#[allow(clippy::print_stderr)] // the skip notice is meant to be seen in test output
fn cluster_or_skip(test: &str) -> Option<Cluster> {
    match Cluster::start() {
        Ok(c) => Some(c),
        Err(why) => {
            eprintln!("SKIPPED {test}: no Slurm cluster: {why}");
            None
        }
    }
}

fn status(run_dir: &Path) -> Value {
    std::fs::read(run_dir.join("status.json")).ok().and_then(|b| serde_json::from_slice(&b).ok()).unwrap_or(Value::Null)
}

fn steps(run_dir: &Path) -> Vec<i64> {
    jsonl(&run_dir.join("metrics.jsonl")).iter().map(|m| m["step"].as_i64().unwrap()).collect()
}

/// The run ids of a dry run's table.
fn ids(stdout: &str) -> Vec<String> {
    stdout.lines().skip(1).take_while(|l| !l.is_empty()).filter_map(|l| l.split_whitespace().next().map(str::to_string)).collect()
}

fn sweep_record(dir: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(dir.join("sweep.json")).unwrap()).unwrap()
}

#[test]
fn the_batch_script_of_a_dry_run() {
    let cx = TestContext::new();
    let local = cx.run(&["sweep", "spec.yaml", "lr=[1e-5,4e-5]", "seed=0,1", "--dry-run"]);
    let r = cx.run(&[
        "sweep", "spec.yaml", "lr=[1e-5,4e-5]", "seed=0,1", "--launcher", "slurm", "--dry-run", "--partition", "gpu", "--time", "4:00:00",
        "--cpus-per-task", "8", "--mem", "32G", "--gres", "gpu:1", "--max-parallel", "2", "--sbatch-arg=--account=proj",
        "--setup", "module load cuda", "--stop-before", "120",
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(ids(&r.stdout), ids(&local.stdout), "the same runs whatever the launcher");
    let script = &r.stdout[r.stdout.find("#!/bin/bash").expect("a batch script")..];
    for line in [
        "#SBATCH --array=0-3%2",
        "#SBATCH --partition=gpu",
        "#SBATCH --time=4:00:00",
        "#SBATCH --cpus-per-task=8",
        "#SBATCH --mem=32G",
        "#SBATCH --gres=gpu:1",
        "#SBATCH --account=proj",
        "#SBATCH --signal=B:USR1@120",
        "#SBATCH --requeue",
        "module load cuda",
    ] {
        assert!(script.lines().any(|l| l == line), "missing `{line}`:\n{script}");
    }
    let spec = std::fs::canonicalize(cx.path().join("spec.yaml")).unwrap();
    assert!(script.contains(&format!("0) run_id={}; args=(run {} optimizer.learning_rate=1e-5 seed=0) ;;", ids(&local.stdout)[0], spec.display())), "{script}");
    assert!(script.contains(env!("CARGO_BIN_EXE_rlx")), "the tasks run this rlx: {script}");
    // It is valid bash, and a dry run writes nothing.
    let check = Command::new("bash").arg("-n").stdin(Stdio::piped()).spawn().and_then(|mut c| {
        use std::io::Write;
        c.stdin.take().unwrap().write_all(script.as_bytes())?;
        c.wait()
    });
    assert!(check.unwrap().success());
    assert!(!cx.path().join("sweeps").exists());

    // The spec's `sweep` section says the same, flags override it, and run ids ignore it.
    let spec_text = std::fs::read_to_string(cx.path().join("spec.yaml")).unwrap();
    cx.write("spec.yaml", &format!("{spec_text}sweep:\n  launcher: slurm\n  max_parallel: 3\n  slurm: {{partition: cpu, setup: 'source venv/bin/activate', sbatch_args: [--qos=low], rlx: /opt/rlx}}\n"));
    let r = cx.run(&["sweep", "spec.yaml", "lr=[1e-5,4e-5]", "seed=0,1", "--dry-run", "--partition", "big"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(ids(&r.stdout), ids(&local.stdout), "`sweep` is not part of the run id");
    for line in ["#SBATCH --array=0-3%3", "#SBATCH --partition=big", "#SBATCH --qos=low", "source venv/bin/activate", "/opt/rlx \"${args[@]}\" &"] {
        assert!(r.stdout.lines().any(|l| l == line), "missing `{line}`:\n{}", r.stdout);
    }
    let local_again = cx.run(&["sweep", "spec.yaml", "lr=[1e-5,4e-5]", "seed=0,1", "--dry-run", "--launcher", "local"]);
    assert!(!local_again.stdout.contains("#!/bin/bash"));
    let r = cx.run(&["sweep", "spec.yaml", "lr=[1e-5,4e-5]", "--dry-run", "--launcher", "local", "--gres", "gpu:1"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stderr.contains("--gres apply to Slurm sweeps only"), "{}", r.stderr);
    let bad = cx.write("bad.yaml", &format!("{spec_text}sweep: {{launcher: pbs}}\n"));
    let r = cx.run(&["sweep", bad.to_str().unwrap(), "lr=[1e-5,4e-5]", "--dry-run"]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("sweep.launcher"), "{}", r.stderr);
}

#[test]
fn without_slurm_a_submission_says_what_is_missing() {
    let cx = TestContext::new();
    let empty = cx.path().join("no-bin");
    std::fs::create_dir_all(&empty).unwrap();
    let r = Run::from(cx.rlx().args(["sweep", "spec.yaml", "lr=[1e-5,4e-5]", "--launcher", "slurm"]).env("PATH", &empty).output().unwrap());
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("`sbatch` is not on PATH"), "{}", r.stderr);
    assert!(r.stderr.contains("batch script:"), "{}", r.stderr);
    // The script it would have submitted is kept for the user.
    let sweep = std::fs::read_dir(cx.path().join("sweeps")).unwrap().next().unwrap().unwrap().path();
    assert!(std::fs::read_to_string(sweep.join("slurm-1.sh")).unwrap().contains("#SBATCH --array=0-1"));
}

/// Waits for `done`, failing with the cluster's state after `limit`.
#[track_caller]
fn wait(cluster: &Cluster, limit: Duration, what: &str, done: impl FnMut() -> bool) {
    if cluster.wait_until(limit, done).is_err() {
        panic!("timed out waiting for {what}\n{}", cluster.diagnose());
    }
}

#[test]
fn a_sweep_runs_through_slurm_cancelled_members_resume_and_finished_ones_are_skipped() {
    let Some(cluster) = cluster_or_skip("a_sweep_runs_through_slurm") else { return };
    let cx = TestContext::new();
    tiny_model(&cx.path().join("tiny"));
    cx.write("spec.yaml", &spec_with(12, 1, ""));
    let slurm = |args: &[&str]| Run::from(cx.rlx().args(args).env("SLURM_CONF", &cluster.conf).output().unwrap());
    let launch = ["sweep", "spec.yaml", "lr=[1e-3,2e-3]", "--launcher", "slurm", "--max-parallel", "2"];

    // 1. Two members as one job array.
    let dry = cx.run(&["sweep", "spec.yaml", "lr=[1e-3,2e-3]", "--dry-run"]);
    let members = ids(&dry.stdout);
    assert_eq!(members.len(), 2);
    let r = slurm(&launch);
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    assert!(r.stderr.contains("submitted Slurm job"), "{}", r.stderr);
    let sweep_dir = std::fs::read_dir(cx.path().join("sweeps")).unwrap().next().unwrap().unwrap().path();
    let rec = sweep_record(&sweep_dir);
    let job1 = rec["slurm_jobs"][0]["job_id"].as_str().unwrap().to_string();
    assert_eq!(rec["slurm_jobs"][0]["array"], "0-1%2");
    assert_eq!(rec["members"][0]["slurm"], serde_json::json!({"job_id": job1, "array_index": 0}));
    assert_eq!(rec["members"][1]["state"], format!("queued (job {job1}_1)"));
    let (a, b) = (cx.path().join("runs").join(&members[0]), cx.path().join("runs").join(&members[1]));

    // 2. Cancel member 0 mid-run: Slurm's SIGTERM reaches `rlx run`, which checkpoints.
    wait(&cluster, Duration::from_secs(240), "member 0 to train two steps", || steps(&a).len() >= 3);
    let st = cluster.cmd("scancel").arg(format!("{job1}_0")).status().unwrap();
    assert!(st.success());
    wait(&cluster, Duration::from_secs(240), "the first job to end", || cluster.queue().is_empty());
    let sa = status(&a);
    assert_eq!(sa["state"], "interrupted", "{sa}\n{}", std::fs::read_to_string(sweep_dir.join(format!("slurm-{job1}_0.out"))).unwrap_or_default());
    let done_before = sa["steps_done"].as_u64().unwrap();
    assert!((1..12).contains(&done_before), "{sa}");
    assert_eq!(status(&b)["state"], "finished", "member 1 ran to the end");
    let b_lines = steps(&b).len();
    let out1 = std::fs::read_to_string(sweep_dir.join(format!("slurm-{job1}_1.out"))).unwrap();
    assert!(out1.contains(&format!("member 1 ({})", members[1])), "{out1}");

    // The status command reads both the run directories and the scheduler.
    let st = slurm(&["sweep", "status", sweep_dir.to_str().unwrap()]);
    assert_eq!(st.code, 0, "{}", st.stderr);
    let line = |id: &str| st.stdout.lines().find(|l| l.contains(id)).unwrap_or_default().to_string();
    assert!(line(&members[0]).contains(&format!("interrupted {done_before}/12")), "{}", st.stdout);
    assert!(line(&members[0]).contains(&format!("task {job1}_0")), "{}", st.stdout);
    assert!(line(&members[1]).contains("finished 12/12"), "{}", st.stdout);
    assert!(st.stderr.contains("note: no sacct"), "accounting is off on this cluster: {}", st.stderr);

    // 3. Resubmission: the finished member is skipped, the cancelled one resumes. Beside it, a
    //    second sweep whose member is told to stop before its time limit and requeues itself.
    let r = slurm(&launch);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stderr.contains("1 finished run(s) skipped"), "{}", r.stderr);
    assert!(r.stderr.contains("(array 0%2, 1 task(s))"), "{}", r.stderr);
    let rec = sweep_record(&sweep_dir);
    let job2 = rec["slurm_jobs"][1]["job_id"].as_str().unwrap().to_string();
    assert_ne!(job2, job1);
    assert_eq!(rec["members"][0]["slurm"]["job_id"], job2.as_str());
    assert_eq!(rec["members"][1]["slurm"]["job_id"], job1.as_str(), "the skipped member keeps its task");
    assert!(sweep_dir.join("slurm-2.sh").exists());

    let requeue = slurm(&["sweep", "spec.yaml", "lr=[3e-3]", "--launcher", "slurm"]);
    assert_eq!(requeue.code, 0, "{}", requeue.stderr);
    let requeue_dir = std::fs::read_dir(cx.path().join("sweeps")).unwrap().flatten().map(|e| e.path()).find(|p| *p != sweep_dir).unwrap();
    let rrec = sweep_record(&requeue_dir);
    let job3 = rrec["slurm_jobs"][0]["job_id"].as_str().unwrap().to_string();
    let c = cx.path().join("runs").join(rrec["members"][0]["run_id"].as_str().unwrap());
    wait(&cluster, Duration::from_secs(240), "the requeue member to train two steps", || steps(&c).len() >= 3);
    // What Slurm sends `stop_before_s` ahead of the time limit (`--signal=B:USR1@S`), by hand.
    let st = cluster.cmd("scancel").args(["--batch", "--signal=USR1", &format!("{job3}_0")]).status().unwrap();
    assert!(st.success());

    wait(&cluster, Duration::from_secs(300), "both jobs to end", || cluster.queue().is_empty());
    let sa = status(&a);
    assert_eq!(sa["state"], "finished", "{sa}");
    assert_eq!(steps(&a), (-1..12).collect::<Vec<i64>>(), "every step once across the cancel");
    assert!(jsonl(&a.join("events.jsonl")).iter().any(|e| e["event"] == "resume"));
    assert_eq!(steps(&b).len(), b_lines, "the finished member did not run again");
    assert!(!sweep_dir.join(format!("slurm-{job2}_1.out")).exists());

    let out3 = std::fs::read_to_string(requeue_dir.join(format!("slurm-{job3}_0.out"))).unwrap();
    assert!(out3.contains("stopped before the time limit; requeueing its task"), "{out3}");
    assert!(out3.contains("restart 1"), "the requeued task ran again: {out3}");
    let sc = status(&c);
    assert_eq!(sc["state"], "finished", "{sc}\n{out3}");
    assert_eq!(steps(&c), (-1..12).collect::<Vec<i64>>(), "every step once across the requeue");
    let events = jsonl(&c.join("events.jsonl"));
    assert!(events.iter().any(|e| e["event"] == "resume"), "{events:?}");

    // 4. Everything finished: nothing left to submit.
    let r = slurm(&launch);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stderr.contains("2 finished run(s) skipped") && r.stderr.contains("nothing to submit"), "{}", r.stderr);
    assert_eq!(sweep_record(&sweep_dir)["slurm_jobs"].as_array().unwrap().len(), 2);
}
