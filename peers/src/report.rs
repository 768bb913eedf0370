//! Reading back what criterion measured in this run, and printing ratio tables; resident
//! memory.
//!
//! Criterion keeps its estimates in `<criterion home>/<group>/<function>/<parameter>/new/
//! estimates.json`; the home is found as criterion finds it: `$CRITERION_HOME`, else
//! `$CARGO_TARGET_DIR/criterion`, else (run by cargo) the target directory `cargo metadata`
//! names, else `target/criterion`. Only estimates written by this process are read (older
//! files are stale: a filtered run, say).

use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::SystemTime;

static STARTED: OnceLock<SystemTime> = OnceLock::new();

/// Call first thing in `main`: estimates older than this are ignored.
pub fn mark_start() {
    STARTED.get_or_init(SystemTime::now);
}

fn criterion_home() -> PathBuf {
    static HOME: OnceLock<PathBuf> = OnceLock::new();
    HOME.get_or_init(|| {
        if let Some(home) = std::env::var_os("CRITERION_HOME") {
            return home.into();
        }
        if let Some(target) = std::env::var_os("CARGO_TARGET_DIR") {
            return PathBuf::from(target).join("criterion");
        }
        cargo_target_directory()
            .map(|target| target.join("criterion"))
            .unwrap_or_else(|| PathBuf::from("target/criterion"))
    })
    .clone()
}

/// `target_directory` from `$CARGO metadata`, as criterion asks it.
fn cargo_target_directory() -> Option<PathBuf> {
    let cargo = std::env::var_os("CARGO")?;
    let out =
        std::process::Command::new(cargo).args(["metadata", "--format-version", "1", "--no-deps"]).output().ok()?;
    let json = String::from_utf8(out.stdout).ok()?;
    let key = "\"target_directory\":\"";
    let start = json.find(key)? + key.len();
    let end = start + json[start..].find('"')?;
    Some(json[start..end].replace("\\\\", "\\").into())
}

/// The time per iteration (ns) criterion estimated in this run, if it measured it: its
/// typical estimate, the one it prints (the slope of the linear fit under linear sampling,
/// else the mean).
pub fn typical_ns(group: &str, function: &str, parameter: &str) -> Option<f64> {
    let path = criterion_home().join(group).join(function).join(parameter).join("new").join("estimates.json");
    let modified = std::fs::metadata(&path).ok()?.modified().ok()?;
    if modified < *STARTED.get()? {
        return None;
    }
    let json = std::fs::read_to_string(&path).ok()?;
    let typical = &json[json.find("\"slope\":{").or_else(|| json.find("\"mean\""))?..];
    let value = &typical[typical.find("\"point_estimate\":")? + "\"point_estimate\":".len()..];
    let end = value.find([',', '}'])?;
    value[..end].trim().parse().ok()
}

/// Criterion's directory name for a function id (`make_filename_safe`).
pub fn safe(name: &str) -> String {
    name.replace(['?', '"', '/', '\\', '*', '<', '>', ':', '|', '^'], "_")
}

/// Operations per second for a row whose iteration is `ops_per_iter` operations.
pub fn rate(group: &str, function: &str, parameter: &str, ops_per_iter: f64) -> Option<f64> {
    typical_ns(group, &safe(function), parameter).map(|ns| ops_per_iter * 1e9 / ns)
}

/// `12345678.0` → "12.35 M".
pub fn si(x: f64) -> String {
    if x >= 1e9 {
        format!("{:.2} G", x / 1e9)
    } else if x >= 1e6 {
        format!("{:.2} M", x / 1e6)
    } else if x >= 1e3 {
        format!("{:.2} k", x / 1e3)
    } else {
        format!("{x:.2} ")
    }
}

/// Resident memory of this process, bytes (`/proc/self/statm`), if readable.
pub fn resident_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * page_size())
}

fn page_size() -> u64 {
    // The kernel's page size, from the auxiliary vector; 4 KiB if it cannot be read.
    std::fs::read("/proc/self/auxv")
        .ok()
        .and_then(|auxv| {
            auxv.chunks_exact(16).find_map(|pair| {
                let key = u64::from_ne_bytes(pair[..8].try_into().ok()?);
                if key == 6 { Some(u64::from_ne_bytes(pair[8..].try_into().ok()?)) } else { None }
            })
        })
        .unwrap_or(4096)
}

/// One row of a ratio table: a criterion group and parameter, measured for several peers.
#[derive(Debug)]
pub struct Row {
    pub label: String,
    pub group: String,
    pub parameter: String,
    /// Operations one criterion iteration stands for (producers × operations each).
    pub ops_per_iter: f64,
}

/// Other processes' load during each measured row, by `group/function/parameter`.
static LOADS: std::sync::Mutex<Vec<(String, f64)>> = std::sync::Mutex::new(Vec::new());

/// Remembers the other processes' load (cores) while one row was measured.
pub fn note_load(group: &str, function: &str, parameter: &str, cores: f64) {
    let id = format!("{group}/{}/{parameter}", safe(function));
    LOADS.lock().unwrap_or_else(|e| e.into_inner()).push((id, cores));
}

pub fn load_of(group: &str, function: &str, parameter: &str) -> Option<f64> {
    let id = format!("{group}/{}/{parameter}", safe(function));
    let loads = LOADS.lock().unwrap_or_else(|e| e.into_inner());
    loads.iter().rev().find(|(i, _)| *i == id).map(|(_, c)| *c)
}

/// Prints `unit`/s for every peer of every row, and the first peer's rate divided by each
/// other's ("×3.2" = the first peer did 3.2 times as many). Missing measurements print "-".
pub fn print_table(title: &str, unit: &str, rows: &[Row], peers: &[&str]) {
    println!();
    println!("{title}");
    print!("{:<32}", "");
    for peer in peers {
        print!(" | {peer:>22}");
    }
    println!(" | other load");
    for row in rows {
        let rates: Vec<_> = peers.iter().map(|peer| rate(&row.group, peer, &row.parameter, row.ops_per_iter)).collect();
        print!("{:<32}", row.label);
        for (i, r) in rates.iter().enumerate() {
            let cell = match (r, rates[0]) {
                (None, _) => "-".to_owned(),
                (Some(r), Some(first)) if i > 0 => format!("{}{unit}/s ×{:.2}", si(*r), first / r),
                (Some(r), _) => format!("{}{unit}/s", si(*r)),
            };
            print!(" | {cell:>22}");
        }
        let load = peers
            .iter()
            .filter_map(|peer| load_of(&row.group, peer, &row.parameter))
            .fold(None, |max: Option<f64>, l| Some(max.map_or(l, |m| m.max(l))));
        println!(" | {}", load.map_or("-".to_owned(), |l| format!("≤ {l:.2} cores")));
    }
    println!("(×N: {} did N times as many in the same run; criterion's typical estimate, as it prints it;", peers[0]);
    println!(" other load: the most CPU other processes used while one of the row's peers was measured)");
}

/// Criterion's options that take a value (so that value is not the filter).
const VALUED: [&str; 16] = [
    "--save-baseline",
    "-s",
    "--baseline",
    "-b",
    "--baseline-lenient",
    "--load-baseline",
    "--measurement-time",
    "--warm-up-time",
    "--sample-size",
    "--nresamples",
    "--noise-threshold",
    "--confidence-level",
    "--significance-level",
    "--profile-time",
    "--color",
    "--output-format",
];

/// The benchmark filter given on the command line (`cargo bench --bench x -- FILTER`), if any.
pub fn filter() -> Option<String> {
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        if VALUED.contains(&arg.as_str()) || arg == "--plotting-backend" || arg == "--format" {
            args.next();
        } else if !arg.starts_with('-') {
            return Some(arg);
        }
    }
    None
}

/// Whether a benchmark id (`group/function/parameter`) can pass the filter, so that setup
/// for filtered-out rows (pre-arming a million timeouts) is skipped. Substring match; when
/// it says yes, criterion's own (regex) filter still decides.
pub fn wanted(id: &str) -> bool {
    match filter() {
        None => true,
        Some(f) => {
            let plain: String = f.chars().filter(|c| !"^$\\".contains(*c)).collect();
            id.contains(&plain) || f.chars().any(|c| "[](){}|*+?.".contains(c))
        }
    }
}

/// How busy the rest of the machine was while something ran: CPU time used by other
/// processes, from `/proc/stat` (all CPUs) minus `/proc/self/stat` (this process), per
/// second of wall time. On a shared machine a row with other load near a whole core was
/// measured on about one core less than its neighbours.
#[derive(Debug, Clone, Copy)]
pub struct OtherLoad {
    at: std::time::Instant,
    busy: u64,
    mine: u64,
}

fn machine_busy_ticks() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let cpu = stat.lines().next()?;
    let f: Vec<u64> = cpu.split_whitespace().skip(1).filter_map(|x| x.parse().ok()).collect();
    // user nice system idle iowait irq softirq steal
    Some(f.first()? + f.get(1)? + f.get(2)? + f.get(5)? + f.get(6)? + f.get(7)?)
}

fn my_busy_ticks() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name, which is in parentheses and may hold spaces.
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the whole line: 11 and 12 after the name.
    Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?)
}

impl OtherLoad {
    pub fn start() -> OtherLoad {
        OtherLoad {
            at: std::time::Instant::now(),
            busy: machine_busy_ticks().unwrap_or(0),
            mine: my_busy_ticks().unwrap_or(0),
        }
    }

    /// Cores' worth of CPU other processes used since `start` (ticks of 10 ms, so rough
    /// over short spans).
    pub fn cores(&self) -> f64 {
        let busy = machine_busy_ticks().unwrap_or(0).saturating_sub(self.busy);
        let mine = my_busy_ticks().unwrap_or(0).saturating_sub(self.mine);
        let wall = self.at.elapsed().as_secs_f64() * 100.0;
        if wall <= 0.0 {
            return 0.0;
        }
        (busy.saturating_sub(mine) as f64 / wall).max(0.0)
    }
}
