//! What the process itself can tell about the machine and about its own use of it:
//! file descriptor limits, resident memory, heap bytes allocated (a counting allocator,
//! on only while a scenario asks for it), precise sleeping.

use std::alloc::{GlobalAlloc, Layout};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::time::Instant;

/// The gateway's allocator (jemalloc), counting the bytes asked for while [`count_allocations`] is on.
/// Off, it costs one relaxed load per allocation: the contended counter would otherwise
/// tax every target (the gateway allocates more than the passthrough, so the tax would
/// not be even).
pub struct Counting;

static COUNTING: AtomicBool = AtomicBool::new(false);
static ALLOCATED: AtomicU64 = AtomicU64::new(0);
/// Allocated less freed while counting: the heap a scenario holds.
static LIVE: AtomicI64 = AtomicI64::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if COUNTING.load(Ordering::Relaxed) {
            ALLOCATED.fetch_add(layout.size() as u64, Ordering::Relaxed);
            LIVE.fetch_add(layout.size() as i64, Ordering::Relaxed);
        }
        // SAFETY: forwarded as is to the gateway's allocator.
        unsafe { tikv_jemallocator::Jemalloc.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if COUNTING.load(Ordering::Relaxed) {
            ALLOCATED.fetch_add(layout.size() as u64, Ordering::Relaxed);
            LIVE.fetch_add(layout.size() as i64, Ordering::Relaxed);
        }
        // SAFETY: forwarded as is to the gateway's allocator.
        unsafe { tikv_jemallocator::Jemalloc.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if COUNTING.load(Ordering::Relaxed) {
            // A growing realloc may move: count the new size, as a fresh buffer would.
            ALLOCATED.fetch_add(new_size as u64, Ordering::Relaxed);
            LIVE.fetch_add(new_size as i64 - layout.size() as i64, Ordering::Relaxed);
        }
        // SAFETY: forwarded as is to the gateway's allocator.
        unsafe { tikv_jemallocator::Jemalloc.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if COUNTING.load(Ordering::Relaxed) {
            LIVE.fetch_sub(layout.size() as i64, Ordering::Relaxed);
        }
        // SAFETY: forwarded as is to the gateway's allocator.
        unsafe { tikv_jemallocator::Jemalloc.dealloc(ptr, layout) }
    }
}

/// Turns allocation counting on or off; returns the bytes counted so far.
pub fn count_allocations(on: bool) -> u64 {
    COUNTING.store(on, Ordering::SeqCst);
    ALLOCATED.load(Ordering::SeqCst)
}

/// Heap bytes allocated and not freed while counting was on.
pub fn live_bytes() -> i64 {
    LIVE.load(Ordering::SeqCst)
}

/// Raises the open-file limit as far as allowed. Returns the soft limit now in force.
/// 10,000 streams through a proxy in one process hold four descriptors each (client,
/// proxy's downstream, proxy's upstream, mock upstream).
pub fn raise_fd_limit(want: u64) -> u64 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we own.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return 1024;
    }
    if lim.rlim_cur >= want {
        return lim.rlim_cur;
    }
    // Root may raise the hard limit too; anyone may raise the soft one up to the hard.
    let raised = libc::rlimit {
        rlim_cur: want,
        rlim_max: want.max(lim.rlim_max),
    };
    // SAFETY: setrlimit reads the struct we own.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
        return want;
    }
    let soft = libc::rlimit {
        rlim_cur: lim.rlim_max,
        rlim_max: lim.rlim_max,
    };
    // SAFETY: as above.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &soft) } == 0 {
        return lim.rlim_max;
    }
    lim.rlim_cur
}

/// A field of `/proc/self/status` in kB (`VmRSS`, `VmHWM`).
pub fn status_kb(field: &str) -> u64 {
    let text = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    parse_status_kb(&text, field).unwrap_or(0)
}

pub fn parse_status_kb(text: &str, field: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let rest = l.strip_prefix(field)?.strip_prefix(':')?;
        rest.trim().trim_end_matches("kB").trim().parse().ok()
    })
}

/// Resident memory of the whole process, in bytes, after giving freed heap back to the
/// system (so a scenario's figure is not hidden by memory an earlier one freed): every
/// jemalloc arena's unused pages are purged at once, not after their decay time.
pub fn rss_bytes_trimmed() -> u64 {
    // `MALLCTL_ARENAS_ALL` (4096) names every arena.
    let name = b"arena.4096.purge\0";
    // SAFETY: a NUL-terminated control name that reads and writes nothing.
    unsafe {
        tikv_jemalloc_sys::mallctl(
            name.as_ptr().cast(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            0,
        );
    }
    status_kb("VmRSS") * 1024
}

/// Makes this thread's sleeps wake on time (the default slack is 50 µs), for the
/// open-loop pacer.
pub fn tight_timer_slack() {
    // SAFETY: PR_SET_TIMERSLACK takes a plain integer and affects only this thread.
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0);
    }
}

/// Sleeps until `t` (no-op when `t` has passed).
pub fn sleep_until(t: Instant) {
    let now = Instant::now();
    if t > now {
        std::thread::sleep(t - now);
    }
}

/// One line about the machine: CPU model, cores, kernel.
pub fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_default();
    format!("{cpu}, {cores} cores, Linux {kernel}")
}

pub fn mb(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

/// Clock ticks per second of `/proc` CPU times.
fn ticks() -> f64 {
    // SAFETY: sysconf reads a constant of the system.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as f64
    } else {
        100.0
    }
}

/// `(name, user + system seconds)` from the text of a `/proc/.../stat` file.
pub fn parse_stat(text: &str) -> Option<(String, f64)> {
    let open = text.find('(')?;
    let close = text.rfind(')')?;
    let name = text.get(open + 1..close)?.to_string();
    // Fields after the name: state is field 3, utime 14 and stime 15.
    let rest: Vec<&str> = text.get(close + 1..)?.split_whitespace().collect();
    let utime: f64 = rest.get(11)?.parse().ok()?;
    let stime: f64 = rest.get(12)?.parse().ok()?;
    Some((name, (utime + stime) / ticks()))
}

/// CPU seconds this process's threads have used, summed by thread group: the proxies'
/// runtime (`servers`), the embedded store's threads (`store`), the load generator
/// (`client`), the mock upstreams (`upstream`), the rest (`other`).
pub fn thread_cpu() -> std::collections::HashMap<&'static str, f64> {
    let mut out = std::collections::HashMap::new();
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return out;
    };
    for t in dir.flatten() {
        let Ok(text) = std::fs::read_to_string(t.path().join("stat")) else {
            continue;
        };
        let Some((name, secs)) = parse_stat(&text) else {
            continue;
        };
        let group = if name.starts_with("servers") {
            "servers"
        } else if name.starts_with("embedded-") || name.starts_with("store") {
            "store"
        } else if name.starts_with("client") {
            "client"
        } else if name.starts_with("upstream") {
            "upstream"
        } else {
            "other"
        };
        *out.entry(group).or_insert(0.0) += secs;
    }
    out
}

/// Microseconds of CPU a thread group used between two [`thread_cpu`] readings, per one
/// of `n` requests (or streams).
pub fn cpu_us_per(
    before: &std::collections::HashMap<&'static str, f64>,
    after: &std::collections::HashMap<&'static str, f64>,
    group: &str,
    n: u64,
) -> f64 {
    (after.get(group).unwrap_or(&0.0) - before.get(group).unwrap_or(&0.0)) * 1e6 / n.max(1) as f64
}
