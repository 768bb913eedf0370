//! The shares add up to the whole, the schedule is one for all, and bad runs are refused.

use super::*;

fn options() -> Options {
    Options {
        addr: "127.0.0.1:80".parse().unwrap(),
        active: 10,
        rate: 100.0,
        path: "/".to_string(),
        warmup: Duration::from_secs(1),
        secs: Duration::from_secs(2),
        max: Duration::from_secs(10),
        quiet_at: None,
        sources: 5,
        silent: 7,
        idle: 3,
        slowloris: 1,
        unread: 0,
        header_timeout: Duration::from_secs(2),
        idle_timeout: Duration::from_secs(5),
        send_timeout: Duration::from_secs(5),
        trickle: Duration::from_millis(100),
        open_per_ms: 20,
        processes: 3,
    }
}

#[test]
fn the_shares_add_up_to_every_class_the_rate_and_the_sources() {
    let o = options();
    let shares: Vec<Share> = (0..3).map(|i| o.share(i)).collect();
    assert_eq!(shares.iter().map(|s| s.active).sum::<usize>(), 10);
    assert_eq!(shares.iter().map(|s| s.silent).sum::<usize>(), 7);
    assert_eq!(shares.iter().map(|s| s.slowloris).sum::<usize>(), 1);
    assert!((shares.iter().map(|s| s.rate).sum::<f64>() - 100.0).abs() < 1e-9);
    let mut sources: Vec<Ipv4Addr> = shares.iter().flat_map(|s| s.sources.clone()).collect();
    sources.sort_unstable();
    sources.dedup();
    assert_eq!(sources, connect::sources(5).unwrap());
    // The pace split exactly: 20 a ms over 3 processes, not 7 each.
    assert!((shares.iter().map(|s| s.open_per_ms).sum::<f64>() - 20.0).abs() < 1e-9);
}

#[test]
fn every_process_keeps_the_same_schedule() {
    let o = Options { quiet_at: Some(Duration::from_millis(1500)), ..options() };
    let epoch = Instant::now();
    let s = o.schedule(epoch);
    assert!(s.warmup_start > epoch);
    assert_eq!(s.window_start - s.warmup_start, o.warmup);
    assert_eq!(s.window_end - s.window_start, o.secs);
    assert_eq!(s.sending_end - s.window_start, Duration::from_millis(1500));
    assert!(s.quiet && s.end > s.window_end);
}

#[test]
fn bad_runs_are_refused_with_what_to_change() {
    assert!(options().check().is_ok());
    let over = Options { silent: 40_000, processes: 2, ..options() };
    let e = over.check().unwrap_err();
    assert!(e.contains("19500") && e.contains("--processes 3"), "{e}");
    assert!(Options { silent: 40_000, processes: 3, ..options() }.check().is_ok());
    assert!(Options { addr: "10.0.0.1:80".parse().unwrap(), ..options() }.check().unwrap_err().contains("loopback"));
    assert!(Options { max: Duration::from_secs(3), ..options() }.check().is_err());
    assert!(
        Options { quiet_at: Some(Duration::from_secs(2)), ..options() }.check().is_ok(),
        "quiet at the window's end"
    );
    assert!(Options { quiet_at: Some(Duration::from_millis(2001)), ..options() }.check().is_err());
    assert!(Options { rate: 0.0, ..options() }.check().is_err());
    assert!(Options { path: "/a b".to_string(), ..options() }.check().is_err());
    assert!(Options { sources: 20_000_000, ..options() }.check().is_err());
    // Fewer sources than processes: two processes would hand out the same ports.
    assert!(Options { sources: 2, ..options() }.check().unwrap_err().contains("--sources 3"));
    assert!(Options { sources: 3, ..options() }.check().is_ok());
}
