//! Sweeps: a grid of plans from one spec and several axes.
//!
//! `rlx sweep spec.yaml lr=[1e-5,4e-5] group_size=8,16 seed=[0,1,2]` is the cartesian product of
//! the axes (the last one varying fastest), each point planned like `rlx run spec.yaml
//! optimizer.learning_rate=1e-5 grpo.group_size=8 seed=0`. Because run ids hash the resolved spec,
//! the same grid always yields the same runs: a re-launched sweep finds the finished ones.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::spec::diagnostic::{Diagnostic, Diagnostics};
use crate::spec::overrides::{Axis, Override, SweepArg};
use super::{self as plan, Error, Plan};

/// One point of the grid.
#[derive(Debug, Clone)]
pub(crate) struct Member {
    /// The overrides that make this point: fixed ones, then one per axis.
    pub overrides: Vec<Override>,
    /// Axis key → value text, for display.
    pub assignment: BTreeMap<String, String>,
    /// The resolved plan.
    pub plan: Plan,
}

/// An expanded sweep.
#[derive(Debug, Clone)]
pub(crate) struct Sweep {
    /// `<name>-sweep-<hash>`, stable for the same grid.
    pub id: String,
    /// The axes, in command-line order.
    pub axes: Vec<AxisRecord>,
    /// Overrides applied to every member.
    pub fixed: Vec<String>,
    /// The grid points, in order.
    pub members: Vec<Member>,
}

/// An axis as recorded in `sweep.json`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct AxisRecord {
    /// Key path.
    pub key: String,
    /// Values as written.
    pub values: Vec<String>,
    /// True for `seed`: replicates of one configuration.
    pub replicate: bool,
}

/// Upper bound on grid size; a typo like `seed=[0..1000]` should not launch a thousand runs.
pub(crate) const MAX_MEMBERS: usize = 4096;

/// Expands the grid and plans every member. All problems are reported together, once each.
/// `checkpoints` finds the run checkpoint a teacher names, as [`plan::plan_with`]'s.
///
/// # Errors
/// [`Error::Invalid`] with every distinct problem across members.
pub(crate) fn expand(spec_path: &Path, args: &[SweepArg], checkpoints: Option<&dyn plan::Checkpoints>) -> Result<Sweep, Error> {
    let invalid = |d: Vec<Diagnostic>| Error::Invalid { path: spec_path.to_path_buf(), diagnostics: Diagnostics(d) };
    let mut fixed = vec![];
    let mut axes: Vec<&Axis> = vec![];
    for a in args {
        match a {
            SweepArg::Fixed(o) => fixed.push(o.clone()),
            SweepArg::Axis(ax) => {
                if let Some(prev) = axes.iter().find(|p| p.path == ax.path) {
                    return Err(invalid(vec![
                        Diagnostic::new(format!("`{}` is swept twice", ax.dotted()), Some(ax.key_span.clone()))
                            .hint(format!("merge `{}` and `{}` into one axis", prev.raw, ax.raw)),
                    ]));
                }
                axes.push(ax);
            }
        }
    }
    let size = axes.iter().try_fold(1usize, |acc, a| acc.checked_mul(a.values.len())).unwrap_or(usize::MAX);
    if size > MAX_MEMBERS {
        return Err(invalid(vec![Diagnostic::new(format!("the grid has {size} runs; at most {MAX_MEMBERS} are allowed"), None)]));
    }
    let mut points = vec![];
    for point in 0..size {
        // Mixed-radix decomposition: the last axis varies fastest.
        let mut rem = point;
        let mut idx = vec![0; axes.len()];
        for (i, a) in axes.iter().enumerate().rev() {
            idx[i] = rem % a.values.len();
            rem /= a.values.len();
        }
        let mut overrides = fixed.clone();
        let mut assignment = BTreeMap::new();
        for (a, &i) in axes.iter().zip(&idx) {
            let o = a.at(i);
            assignment.insert(a.dotted(), o.value.span.text().trim().to_string());
            overrides.push(o);
        }
        points.push((overrides, assignment));
    }
    let records = axes
        .iter()
        .map(|a| AxisRecord { key: a.dotted(), values: a.values.iter().map(|v| v.span.text().trim().to_string()).collect(), replicate: a.is_replicate() })
        .collect();
    from_points(spec_path, records, &fixed, points, checkpoints)
}

/// Plans the given points (each point's overrides, fixed ones first, and its assignment of axis
/// values for display) into a [`Sweep`]: the grid of [`expand`], or the configurations that
/// `rlx sweep --sample` draws. All problems are reported together, once each.
///
/// # Errors
/// [`Error::Read`] for the spec file; [`Error::Invalid`] with every distinct problem across points.
pub(crate) fn from_points(spec_path: &Path, axes: Vec<AxisRecord>, fixed: &[Override], points: Vec<(Vec<Override>, BTreeMap<String, String>)>, checkpoints: Option<&dyn plan::Checkpoints>) -> Result<Sweep, Error> {
    let invalid = |d: Vec<Diagnostic>| Error::Invalid { path: spec_path.to_path_buf(), diagnostics: Diagnostics(d) };
    let text = crate::spec::source::read_spec(spec_path).map_err(|source| Error::Read { path: spec_path.to_path_buf(), source })?;
    let mut members = vec![];
    let mut diags: Vec<Diagnostic> = vec![];
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    for (overrides, assignment) in points {
        match plan::plan_text_with(spec_path, text.clone(), &overrides, checkpoints) {
            Ok(plan) => {
                if let Some(&other) = seen.get(&plan.run_id) {
                    let a: &Member = &members[other];
                    diags.push(Diagnostic::new(
                        format!("grid points {:?} and {:?} resolve to the same experiment `{}`", a.assignment, assignment, plan.run_id),
                        None,
                    ));
                    continue;
                }
                seen.insert(plan.run_id.clone(), members.len());
                members.push(Member { overrides, assignment, plan });
            }
            Err(Error::Invalid { diagnostics, .. }) => {
                for d in diagnostics.0 {
                    let dup = diags.iter().any(|e| e.message == d.message && e.span.as_ref().map(|s| s.location()) == d.span.as_ref().map(|s| s.location()));
                    if !dup {
                        diags.push(d);
                    }
                }
            }
            Err(e) => return Err(e),
        }
    }
    if !diags.is_empty() {
        return Err(invalid(diags));
    }
    let name = members.first().map_or("sweep", |m| m.plan.name.as_str());
    let mut h = Sha256::new();
    for m in &members {
        h.update(m.plan.run_id.as_bytes());
        h.update(b"\n");
    }
    let hash: String = h.finalize().iter().take(4).map(|b| format!("{b:02x}")).collect();
    Ok(Sweep { id: format!("{name}-sweep-{hash}"), axes, fixed: fixed.iter().map(Override::canonical).collect(), members })
}

impl Sweep {
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::overrides::parse_sweep;
    use crate::spec::schema::Validator;

    fn setup() -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("u.j2"), "{{ problem.statement }}").unwrap();
        std::fs::write(d.path().join("d.jsonl"), "{}\n").unwrap();
        std::fs::write(
            d.path().join("s.yaml"),
            "name: t\nmodel: {base: a/b}\nbackend: {kind: local}\ndata: {train: [{path: d.jsonl}]}\nprompt: {user: u.j2}\n",
        )
        .unwrap();
        d
    }

    fn args(a: &[&str]) -> Vec<SweepArg> {
        let v = Validator::new();
        a.iter().map(|s| parse_sweep(s, &v).unwrap()).collect()
    }

    #[test]
    fn grid_is_cartesian_and_stable() {
        let d = setup();
        let spec = d.path().join("s.yaml");
        let s = expand(&spec, &args(&["lr=[1e-5,4e-5]", "seed=0,1,2", "steps=5"]), None).unwrap();
        assert_eq!(s.members.len(), 6);
        assert_eq!(s.members[0].assignment["seed"], "0");
        assert_eq!(s.members[1].assignment["seed"], "1");
        assert_eq!(s.members[3].assignment["optimizer.learning_rate"], "4e-5");
        assert!(s.members.iter().all(|m| m.plan.schedule.max_steps == 5));
        assert!(s.axes[1].replicate);
        let ids: std::collections::BTreeSet<_> = s.members.iter().map(|m| m.plan.run_id.clone()).collect();
        assert_eq!(ids.len(), 6);
        let again = expand(&spec, &args(&["lr=[1e-5,4e-5]", "seed=0,1,2", "steps=5"]), None).unwrap();
        assert_eq!(again.id, s.id);
        assert_eq!(again.members[4].plan.run_id, s.members[4].plan.run_id);
    }

    #[test]
    fn errors_are_reported_once() {
        let d = setup();
        let spec = d.path().join("s.yaml");
        let Err(Error::Invalid { diagnostics, .. }) = expand(&spec, &args(&["lr=[1e-5,4e-5]", "grpo.group_sise=4"]), None) else { panic!() };
        assert_eq!(diagnostics.0.len(), 1);
        assert!(diagnostics.0[0].hints.contains(&"did you mean `group_size`?".to_string()));
        let Err(Error::Invalid { diagnostics, .. }) = expand(&spec, &args(&["lr=[1e-5,0.00001]"]), None) else { panic!() };
        assert!(diagnostics.0[0].message.contains("same experiment"));
    }
}
