// Loads the built library and checks version, features and status strings.
use llmtrain::*;

#[test]
fn version_and_abi() {
    let v = version();
    assert_eq!(v.split('.').count(), 3, "version {}", v);
    assert_eq!(abi_version().0, ABI_MAJOR);
    assert_eq!(unsafe { sys::llmt_sizeof(1) }, std::mem::size_of::<sys::llmt_tensor>());
}

#[test]
fn features_are_known_names() {
    let known = ["cuda", "nccl", "mpi", "aio", "openblas", "openmp", "gloo"];
    for f in features() {
        assert!(known.contains(&f.as_str()), "unknown feature {}", f);
    }
}

#[test]
fn status_strings() {
    assert_eq!(status_string(sys::LLMT_OK), "ok");
    assert_eq!(status_string(sys::LLMT_ERR_TIMEOUT), "timed out");
    assert_eq!(status_string(987654), "unknown status");
}

#[test]
fn tensors_and_errors() {
    let mut buf = vec![0f32; 6];
    let t = tensor_f32(&mut buf, &[2, 3]).expect("valid tensor");
    assert_eq!(&t.strides[..2], &[3, 1]);
    let err = tensor_f32(&mut buf, &[2, -3]).err().expect("refused");
    assert_eq!(err.status, sys::LLMT_ERR_INVALID_ARGUMENT);
    let ctx = Context::new().expect("context");
    assert_eq!(ctx.last_error(), "");
}
