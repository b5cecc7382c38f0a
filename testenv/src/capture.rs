//! Output capture for the processes that tests and benches spawn (`kim webhook`,
//! `kim controller`): each pipe is read to its end by a thread into a shared `String`, so the
//! child never blocks on a full pipe and the test can search what it printed so far.

use std::io::Read;
use std::process::{Child, Command};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Text read so far from one pipe (lossy UTF-8), shared with its reader thread.
pub type Captured = Arc<Mutex<String>>;

/// Reads `pipe` to its end (or to a read error) on a new thread, appending every chunk to the
/// returned [`Captured`] (invalid UTF-8 replaced by U+FFFD). Join the handle to wait until the
/// pipe is closed, i.e. the child has exited and everything it wrote is captured.
pub fn capture(pipe: impl Read + Send + 'static) -> (Captured, JoinHandle<()>) {
    let text = Captured::default();
    let sink = text.clone();
    let handle = std::thread::spawn(move || {
        let mut pipe = pipe;
        let mut chunk = [0u8; 8192];
        loop {
            match pipe.read(&mut chunk) {
                Ok(0) | Err(_) => break,
                Ok(n) => sink
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push_str(&String::from_utf8_lossy(&chunk[..n])),
            }
        }
    });
    (text, handle)
}

/// Stops `child` as Kubernetes stops a container: SIGTERM (through `kill(1)`), then SIGKILL
/// if it has not exited after `grace`; reaps it either way. Returns whether it exited within
/// the grace period.
pub fn terminate(child: &mut Child, grace: Duration) -> bool {
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let start = Instant::now();
    while child.try_wait().ok().flatten().is_none() {
        if start.elapsed() > grace {
            let _ = child.kill();
            let _ = child.wait();
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn captures_everything_until_the_pipe_closes() {
        let data: Vec<u8> = b"line one\nline two\n\xff end"
            .iter()
            .copied()
            .cycle()
            .take(100_000)
            .collect();
        let (text, handle) = capture(std::io::Cursor::new(data.clone()));
        handle.join().unwrap();
        assert_eq!(*text.lock().unwrap(), String::from_utf8_lossy(&data));
    }

    #[test]
    fn terminate_stops_a_process_that_honours_sigterm_and_kills_one_that_does_not() {
        let mut polite = Command::new("sleep").arg("30").spawn().unwrap();
        assert!(terminate(&mut polite, Duration::from_secs(5)));
        let mut stubborn = Command::new("sh")
            .args(["-c", "trap '' TERM; sleep 30"])
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(200));
        let start = Instant::now();
        assert!(!terminate(&mut stubborn, Duration::from_millis(300)));
        assert!(stubborn.try_wait().unwrap().is_some(), "killed and reaped");
        assert!(start.elapsed() < Duration::from_secs(5));
    }
}
