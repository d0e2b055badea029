//! A process and its descendants as `/proc` shows them: what admission samples and what the
//! benchmarks charge to the sandbox.

/// Appends the live descendants of `pid` (through `/proc/<pid>/task/*/children`) to `out`.
pub(crate) fn descendants(pid: u32, out: &mut Vec<u32>) {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return };
    for t in tasks.filter_map(Result::ok) {
        let Ok(children) = std::fs::read_to_string(t.path().join("children")) else { continue };
        for c in children.split_whitespace().filter_map(|c| c.parse().ok()) {
            out.push(c);
            descendants(c, out);
        }
    }
}

/// CPU seconds (utime + stime + cutime + cstime) of `pid` and its live descendants: everything
/// they ran, including children they reaped.
pub(crate) fn cpu_seconds(pid: &str) -> f64 {
    let tick = 100.0; // USER_HZ is 100 on Linux.
    let mut pids = vec![pid.to_owned()];
    if let Ok(p) = pid.parse() {
        let mut d = Vec::new();
        descendants(p, &mut d);
        pids.extend(d.iter().map(u32::to_string));
    }
    let mut total = 0.0;
    for p in pids {
        if let Ok(stat) = std::fs::read_to_string(format!("/proc/{p}/stat")) {
            let after = stat.rsplit_once(") ").map_or("", |(_, r)| r);
            let f: Vec<f64> = after.split_whitespace().map(|x| x.parse().unwrap_or(0.0)).collect();
            // Fields 14-17 of stat (utime, stime, cutime, cstime) are 11..15 after the name.
            if f.len() > 15 {
                total += (f[11] + f[12] + f[13] + f[14]) / tick;
            }
        }
    }
    total
}
