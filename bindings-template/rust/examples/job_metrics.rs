//! Drive a whole training job from Rust and print its metrics stream, one
//! JSON line per step, to stdout.
//!
//! usage: cargo run --example job_metrics -- CORPUS_DIR RUN_DIR [STEPS]
//!
//! CORPUS_DIR holds text files (e.g. the repository's doc/); the job
//! prepares them with the byte tokenizer into RUN_DIR/data, trains a tiny
//! GPT-2 for STEPS steps (default 10) with a checkpoint every 5, and writes
//! RUN_DIR/metrics.jsonl as `llmtrain train` would.
use llmtrain::{sys, Job, JobOpts};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 3 {
        eprintln!("usage: job_metrics CORPUS_DIR RUN_DIR [STEPS]");
        std::process::exit(2);
    }
    let steps: i64 = args.get(3).map_or(10, |s| s.parse().expect("STEPS"));
    let spec = format!(
        r#"{{"name": "rust-example",
 "model": {{"arch": "gpt2", "layers": 1, "hidden": 32, "heads": 2, "vocab": 320, "seq_len": 16}},
 "batch": {{"micro": 2, "grad_accum": 1}}, "optimizer": {{"lr": 1e-2}},
 "train": {{"steps": {steps}, "seed": 3, "eval_interval": 5, "log_interval": 0, "threads": 1, "sample_tokens": 0}},
 "data": {{"train": "{corpus}", "tokenizer": {{"kind": "byte"}}}},
 "checkpoint": {{"interval": 5}}, "hardware": {{"gpu": "cpu"}}}}"#,
        corpus = args[1].replace('\\', "\\\\").replace('"', "\\\"")
    );
    let opts = JobOpts { run_dir: Some(args[2].clone()), ..Default::default() };
    let mut job = match Job::new(&spec, &opts) {
        Ok(j) => j,
        Err(e) => {
            eprintln!("job_metrics: {e}"); // the library's message, naming a bad key
            std::process::exit(1);
        }
    };
    loop {
        let m = match job.step() {
            Ok(m) => m,
            Err(e) if e.status == sys::LLMT_ERR_STATE as i32 => break, // stop_at reached
            Err(e) => {
                eprintln!("job_metrics: {e}");
                std::process::exit(1);
            }
        };
        let mut line = format!(
            r#"{{"step": {}, "loss": {}, "grad_norm": {}, "lr": {}, "step_s": {}, "tokens_per_s": {}, "mfu": {}"#,
            m.step, m.loss, m.grad_norm, m.lr, m.step_s, m.tokens_per_s, m.mfu
        );
        if m.events as i64 & sys::LLMT_JOB_EVENT_VALIDATED != 0 && m.val_loss.is_finite() {
            line += &format!(r#", "val_loss": {}"#, m.val_loss);
        }
        if m.events as i64 & sys::LLMT_JOB_EVENT_SAVED != 0 {
            line += &format!(r#", "saved_step": {}"#, m.saved_step);
        }
        println!("{line}}}");
    }
}
