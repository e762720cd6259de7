//! The tests' fake model server (tests/model_support) as a process, for
//! benches and by hand: `fake_model CA_FILE [COMMAND [FINAL_TEXT]]` writes
//! the test CA to CA_FILE, prints `http=PORT https=PORT` once both ports
//! are bound, logs one line per request to stderr, and serves until stdin
//! closes.

#[path = "../tests/model_support/mod.rs"]
mod model_support;

use std::io::Read;

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(ca_file) = args.first() else {
        anyhow::bail!("usage: fake_model CA_FILE [COMMAND [FINAL_TEXT]]");
    };
    let command = args.get(1).map_or("echo hello > foo.txt", String::as_str);
    let final_text = args.get(2).map_or("Done.", String::as_str);
    let server = model_support::FakeModel::start(
        model_support::Script::shell(command, final_text),
        &["localhost", "127.0.0.1", "model.test"],
    );
    server.write_ca(std::path::Path::new(ca_file));
    println!("http={} https={}", server.http_port, server.https_port);
    let seen = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let logger = {
        let seen = seen.clone();
        std::thread::spawn(move || {
            let mut logged = 0;
            loop {
                let all = server.requests();
                for r in &all[logged..] {
                    // The key as received: a test server's fake keys only.
                    let key = r.header("x-api-key").or(r.header("authorization"));
                    eprintln!(
                        "{} {} tls={} key={} -> {}",
                        r.method,
                        r.path,
                        r.tls,
                        key.unwrap_or("-"),
                        r.answered
                    );
                }
                logged = all.len();
                if seen.load(std::sync::atomic::Ordering::SeqCst) {
                    return;
                }
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
        })
    };
    let _ = std::io::stdin().read_to_end(&mut Vec::new());
    seen.store(true, std::sync::atomic::Ordering::SeqCst);
    let _ = logger.join();
    Ok(())
}
