// Misuse through the safe layer: every error carries the status and the
// library's message, and a checkpoint save borrows what it was given until
// the snapshot (Checkpoint::begin -> Save; before, add_f32's slice could be
// dropped before save and the saved tensor was garbage). The compile-time
// half is in the doc tests of `Save` (compile_fail).
use llmtrain::*;
use std::path::PathBuf;

fn tmpdir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("llmt-rs-{}-{}", tag, std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn tiny() -> sys::llmt_model_config {
    let mut c = model_config();
    c.vocab_size = 64;
    c.max_seq_len = 16;
    c.layers = 1;
    c.width = 16;
    c.heads = 2;
    c
}

#[test]
fn errors_carry_status_and_message() {
    let e = Spec::from_file(std::path::Path::new("/nonexistent/spec.json")).err().expect("missing file");
    assert_eq!(e.status, sys::LLMT_ERR_IO);
    assert!(e.message.contains("/nonexistent/spec.json"), "{}", e);
    let mut bad = tiny();
    bad.arch = 7; // out-of-range enum
    let e = Model::new(&bad).err().expect("arch 7");
    assert_eq!(e.status, sys::LLMT_ERR_INVALID_ARGUMENT);
    assert!(e.message.contains("arch 7"), "{}", e);
    let mut bad = tiny();
    bad.struct_size = 3; // a wrong struct version
    let e = Model::new(&bad).err().expect("struct_size 3");
    assert_eq!(e.status, sys::LLMT_ERR_STRUCT_SIZE);
    assert!(e.message.contains("llmt_model_config"), "{}", e);
    let mut m = Model::new(&tiny()).unwrap();
    let mut o = trainer_opts();
    o.micro_batch = 2;
    o.seq_len = 8;
    o.schedule = 9;
    let e = Trainer::new(&mut m, &o).err().expect("schedule 9");
    assert_eq!(e.status, sys::LLMT_ERR_INVALID_ARGUMENT);
    assert!(e.message.contains("schedule 9"), "{}", e);
    let e = Comm::inproc(0).err().expect("0 ranks");
    assert!(e.message.contains("world_size 0"), "{}", e);
}

#[test]
fn save_borrows_until_snapshot() {
    let dir = tmpdir("save");
    let mut m = Model::new(&tiny()).unwrap();
    let mut o = trainer_opts();
    o.micro_batch = 2;
    o.seq_len = 8;
    o.threads = 1;
    let x: Vec<i32> = (0..16).map(|i| i % 64).collect();
    let w: Vec<f32> = (0..1024).map(|i| i as f32).collect();
    let mut ck = Checkpoint::new(&dir, &CheckpointOpts { world_size: 1, ..Default::default() }).unwrap();
    {
        let mut tr = Trainer::new(&mut m, &o).unwrap();
        tr.step(&x, &x, 8).unwrap();
        // a Save dropped without save() saves nothing
        {
            let mut s = ck.begin(1).unwrap();
            s.add_f32("w", &w, &[1024], None, None).unwrap();
        }
        let mut s = ck.begin(1).unwrap();
        s.add_f32("w", &w, &[1024], None, None).unwrap();
        s.set_kv("note", "host slice and trainer").unwrap();
        tr.ckpt_add(&mut s).unwrap();
        s.save(false).unwrap();
        tr.step(&x, &x, 8).unwrap(); // after the snapshot: not in the save
    }
    assert_eq!(ck.list().unwrap(), vec![1]);
    let param0 = m.param(0).unwrap().1.to_vec();
    assert_eq!(ck.open_latest().unwrap(), 1);
    let mut out = vec![0f32; 1024];
    ck.read_f32("w", &mut out, &[1024], None).unwrap();
    assert_eq!(out, w, "the host slice as it was added");
    assert_eq!(ck.get_kv("note").unwrap(), "host slice and trainer");
    // the trainer's state at step 1: a fresh model reads it, one step on it
    // gives the model that stepped twice
    let mut m2 = Model::new(&tiny()).unwrap();
    {
        let mut tr2 = Trainer::new(&mut m2, &o).unwrap();
        let mut ck2 = Checkpoint::new(&dir, &CheckpointOpts { world_size: 1, ..Default::default() }).unwrap();
        ck2.open_latest().unwrap();
        tr2.ckpt_read(&mut ck2).unwrap();
        tr2.step(&x, &x, 8).unwrap();
    }
    assert_eq!(m2.param(0).unwrap().1, &param0[..], "resumed at step 1, stepped to 2");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn cancel_abandons_the_newest_save() {
    let dir = tmpdir("cancel");
    let w: Vec<f32> = (0..64).map(|i| i as f32).collect();
    let mut ck = Checkpoint::new(&dir, &CheckpointOpts { world_size: 1, ..Default::default() }).unwrap();
    let e = ck.cancel().err().expect("nothing to cancel");
    assert_eq!(e.status, sys::LLMT_ERR_STATE);
    assert!(e.message.contains("nothing was begun"), "{}", e);
    let mut s = ck.begin(1).unwrap();
    s.add_f32("w", &w, &[64], None, None).unwrap();
    s.save(false).unwrap();
    let e = ck.cancel().err().expect("committed");
    assert_eq!(e.status, sys::LLMT_ERR_STATE);
    assert!(e.message.contains("step 1 was committed"), "{}", e);
    // Save::cancel: the description goes, nothing is written
    let mut s = ck.begin(2).unwrap();
    s.add_f32("w", &w, &[64], None, None).unwrap();
    s.cancel().unwrap();
    assert_eq!(ck.list().unwrap(), vec![1]);
    assert!(!dir.join("step-000000000002").exists());
    // an async save, then Checkpoint::cancel: never committed, unless the
    // writer committed before the cancel reached it (then the error says so)
    let mut s = ck.begin(3).unwrap();
    s.add_f32("w", &w, &[64], None, None).unwrap();
    s.save(true).unwrap();
    match ck.cancel() {
        Ok(()) => {
            assert_eq!(ck.list().unwrap(), vec![1]);
            assert!(!dir.join("step-000000000003").exists());
        }
        Err(e) => {
            assert_eq!(e.status, sys::LLMT_ERR_STATE);
            assert!(e.message.contains("step 3 was committed"), "{}", e);
            assert_eq!(ck.list().unwrap(), vec![1, 3]);
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}
