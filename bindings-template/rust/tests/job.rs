// A real job from Rust (issue 21): a spec, 20 steps of a tiny GPT on a
// corpus prepared from the repo's doc/*.md, stop and save at 10, resume in a
// new Job, finish; the per-step losses equal `llmtrain train`'s on the same
// spec. Errors carry the library's message (a bad key is named).
// Needs LLMT_SOURCE_ROOT and LLMT_LLMTRAIN (set by test/bindings/run-rust.sh).
use llmtrain::*;
use std::collections::BTreeMap;
use std::path::PathBuf;

fn losses(path: &PathBuf) -> BTreeMap<i64, String> {
    let mut out = BTreeMap::new();
    for line in std::fs::read_to_string(path).expect("metrics.jsonl").lines() {
        if line.contains("\"event\"") || !line.contains("\"loss\":") {
            continue;
        }
        let step: i64 = line.split("\"step\":").nth(1).unwrap().split(',').next().unwrap().parse().unwrap();
        let loss = line.split("\"loss\":").nth(1).unwrap().split(',').next().unwrap().to_string();
        out.insert(step, loss);
    }
    out
}

#[test]
fn job_equals_cli() {
    let (src, exe) = match (std::env::var("LLMT_SOURCE_ROOT"), std::env::var("LLMT_LLMTRAIN")) {
        (Ok(s), Ok(e)) => (PathBuf::from(s), e),
        _ => {
            eprintln!("LLMT_SOURCE_ROOT/LLMT_LLMTRAIN not set: skipped");
            return;
        }
    };
    let tmp = std::env::temp_dir().join(format!("llmt-rsjob-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    let corpus = tmp.join("corpus");
    std::fs::create_dir_all(&corpus).unwrap();
    for e in std::fs::read_dir(src.join("doc")).unwrap() {
        let p = e.unwrap().path();
        if p.extension().map_or(false, |x| x == "md") {
            std::fs::copy(&p, corpus.join(p.file_name().unwrap())).unwrap();
        }
    }
    let spec = format!(r#"{{"name": "bind",
 "model": {{"arch": "gpt2", "layers": 1, "hidden": 32, "heads": 2, "vocab": 320, "seq_len": 16}},
 "batch": {{"micro": 2, "grad_accum": 1}}, "optimizer": {{"lr": 1e-2}},
 "train": {{"steps": 20, "seed": 3, "eval_interval": 0, "log_interval": 0, "threads": 1, "sample_tokens": 0}},
 "data": {{"train": "{}", "tokenizer": {{"kind": "byte"}}}},
 "checkpoint": {{"interval": 10}}, "hardware": {{"gpu": "cpu"}}}}"#, corpus.display());
    let spec_path = tmp.join("spec.json");
    std::fs::write(&spec_path, &spec).unwrap();
    let st = std::process::Command::new(&exe).arg("train").arg(&spec_path).arg("--out").arg(tmp.join("ref"))
        .output().expect("llmtrain train");
    assert!(st.status.success(), "llmtrain train failed: {}", String::from_utf8_lossy(&st.stderr));

    let run = tmp.join("rs").display().to_string();
    {
        let mut job = Job::new(&spec, &JobOpts { run_dir: Some(run.clone()), stop_at: 10, ..Default::default() }).unwrap();
        let info = job.info().unwrap();
        assert_eq!(info.raw.steps, 20);
        assert_eq!(job.plan().unwrap().degrees().unwrap()[Dim::Dp as usize], 1);
        let mut last = 0;
        while let Ok(m) = job.step() {
            last = m.step;
        }
        assert_eq!(last, 10, "stepped to stop_at");
        let e = job.step().err().expect("past stop_at"); // past stop_at: a state error with a message
        assert_eq!(e.status, sys::LLMT_ERR_STATE);
        assert!(!e.message.is_empty());
        job.finish().unwrap();
    }
    {
        let mut job = Job::new(&spec, &JobOpts { run_dir: Some(run.clone()), resume: true, ..Default::default() }).unwrap();
        assert_eq!(job.info().unwrap().raw.start_step, 10);
        let m = job.run(0).unwrap();
        assert_eq!(m.step, 20);
    }
    let a = losses(&tmp.join("ref/metrics.jsonl"));
    let b = losses(&PathBuf::from(&run).join("metrics.jsonl"));
    assert_eq!(a.len(), 20);
    assert_eq!(a, b, "per-step losses equal llmtrain train's");

    // errors: the library's message, the key named
    let bad = spec.replace("\"layers\": 1", "\"layers\": 1, \"no_such_key\": 1");
    let e = Job::new(&bad, &JobOpts { run_dir: Some(tmp.join("bad").display().to_string()), ..Default::default() }).err().expect("bad key refused");
    assert_eq!(e.status, sys::LLMT_ERR_SPEC);
    assert!(e.message.contains("no_such_key"), "message: {}", e.message);
    let tp = spec.replace("\"batch\"", "\"parallelism\": {\"tp\": 2}, \"batch\"");
    let e = Job::new(&tp, &JobOpts { run_dir: Some(tmp.join("tp").display().to_string()), ..Default::default() }).err().expect("tp refused");
    assert!(e.message.contains("parallelism.tp"), "message: {}", e.message);
    println!("job: 20 steps, save + resume, losses equal the CLI's; errors: {}", e);

    // a checkpoint of the host's own slices, read back resharded
    let mut ck = Checkpoint::new(&tmp.join("ck"), &CheckpointOpts { world_size: 1, ..Default::default() }).unwrap();
    let w: Vec<f32> = (0..12).map(|x| x as f32).collect();
    let mut save = ck.begin(1).unwrap();
    save.add_f32("w", &w, &[3, 4], None, None).unwrap();
    save.save(true).unwrap();
    ck.wait().unwrap();
    assert_eq!(ck.open_latest().unwrap(), 1);
    let mut half = vec![0f32; 6];
    ck.read_f32("w", &mut half, &[3, 2], Some(&[0, 2])).unwrap();
    assert_eq!(half, vec![2., 3., 6., 7., 10., 11.]);
    let _ = std::fs::remove_dir_all(&tmp);
}
