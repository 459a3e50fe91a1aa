//! Rust bindings for libllmtrain. `sys` is the raw layer, generated from
//! include/llmtrain.h by tools/gen_bindings.py; this file is the safe layer:
//! owned handles freed by Drop, `Result<_, Error>` carrying the status and
//! the library's message (the thread's llmt_last_error), slices for
//! tensors. No external crates.
//!
//! Threads (doc/bindings.md): no handle is `Sync`. `Spec` and `Plan` are
//! immutable (their queries are thread-safe): `Send + Sync`. `Job`,
//! `Model`, `Trainer`, `Checkpoint`, `Dataset`, `Loader`, `Tokenizer` and
//! `Comm` are driven by one thread at a time: `Send`, not `Sync`. A
//! `Trainer` borrows its `Model` and a `Loader` its `Dataset` (lifetimes),
//! so use after destroy and double destroy cannot be written.
#![allow(clippy::missing_safety_doc)]
pub mod sys;

use std::ffi::{CStr, CString};
use std::marker::PhantomData;
use std::os::raw::{c_char, c_void};
use std::path::Path;
use std::ptr;

/// The ABI major these declarations were written against.
pub const ABI_MAJOR: u32 = 1;

/// A failing status with the library's message for it.
#[derive(Debug, Clone, PartialEq)]
pub struct Error {
    pub status: i32,
    pub message: String,
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} (status {}): {}", status_string(self.status), self.status, self.message)
    }
}
impl std::error::Error for Error {}

pub type Result<T> = std::result::Result<T, Error>;

fn cstr(p: *const c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

fn cs(s: &str) -> Result<CString> {
    CString::new(s).map_err(|_| Error { status: sys::LLMT_ERR_INVALID_ARGUMENT, message: format!("{:?} holds a NUL byte", s) })
}

fn path_cs(p: &Path) -> Result<CString> {
    cs(&p.to_string_lossy())
}

/// Turn a status into a Result: the message is the calling thread's last
/// failure (whatever handle the C call recorded it on).
fn check(status: sys::llmt_status) -> Result<()> {
    if status == sys::LLMT_OK {
        return Ok(());
    }
    let same = unsafe { sys::llmt_last_error_status() } == status;
    let message = if same { cstr(unsafe { sys::llmt_last_error() }) } else { String::new() };
    Err(Error { status, message })
}

/// Clear the thread's last failure, then call.
fn call(f: impl FnOnce() -> sys::llmt_status) -> Result<()> {
    unsafe { sys::llmt_last_error_clear() };
    check(f())
}

fn layout_ok() -> Result<()> {
    static ONCE: std::sync::OnceLock<std::result::Result<(), String>> = std::sync::OnceLock::new();
    let r = ONCE.get_or_init(|| {
        let major = unsafe { sys::llmt_abi_version() } >> 16;
        if major != ABI_MAJOR {
            return Err(format!("libllmtrain ABI {} != bindings ABI {}", major, ABI_MAJOR));
        }
        sys::check_layout()
    });
    r.clone().map_err(|m| Error { status: sys::LLMT_ERR_VERSION, message: m })
}

pub fn version() -> String {
    cstr(unsafe { sys::llmt_version() })
}
pub fn abi_version() -> (u32, u32) {
    let v = unsafe { sys::llmt_abi_version() };
    (v >> 16, v & 0xffff)
}
pub fn status_string(status: i32) -> String {
    cstr(unsafe { sys::llmt_status_string(status) })
}
/// Names of the optional features of this build ("mpi", "openblas", ...).
pub fn features() -> Vec<String> {
    let bits = unsafe { sys::llmt_build_features() };
    (0..64).filter(|b| bits & (1u64 << b) != 0).map(|b| cstr(unsafe { sys::llmt_feature_name(1u64 << b) })).collect()
}

/// Size-queried text output: f(buf, buflen, needed).
fn text(mut f: impl FnMut(*mut c_char, usize, *mut usize) -> sys::llmt_status) -> Result<String> {
    let mut need = 0usize;
    let s = f(ptr::null_mut(), 0, &mut need);
    if s != sys::LLMT_OK && s != sys::LLMT_ERR_BUFFER_TOO_SMALL {
        check(s)?;
    }
    let mut buf = vec![0u8; need + 1];
    call(|| f(buf.as_mut_ptr() as *mut c_char, buf.len(), &mut need))?;
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    Ok(String::from_utf8_lossy(&buf[..end]).into_owned())
}

macro_rules! owned {
    ($name:ident, $raw:ty, $destroy:path) => {
        impl Drop for $name {
            fn drop(&mut self) {
                unsafe { $destroy(self.raw) }
            }
        }
    };
}

/// A context: logging and the error detail of creation calls. Every handle
/// below that needs one owns its own.
pub struct Context {
    raw: *mut sys::llmt_context,
}
owned!(Context, sys::llmt_context, sys::llmt_context_destroy);
unsafe impl Send for Context {}
impl Context {
    pub fn new() -> Result<Context> {
        layout_ok()?;
        let mut raw = ptr::null_mut();
        call(|| unsafe { sys::llmt_context_create(ptr::null(), &mut raw) })?;
        Ok(Context { raw })
    }
    pub fn last_error(&self) -> String {
        cstr(unsafe { sys::llmt_context_last_error(self.raw) })
    }
}

// ------------------------------------------------------------------ spec

/// A parsed, validated job spec (immutable; queries are thread-safe).
pub struct Spec {
    raw: *mut sys::llmt_spec,
    _ctx: std::sync::Arc<CtxBox>,
}
/// A context shared by the handles that point into it (a spec's copies
/// inside plans and jobs keep using it).
pub struct CtxBox(Context);
unsafe impl Sync for CtxBox {}
impl Drop for Spec {
    fn drop(&mut self) {
        unsafe { sys::llmt_spec_destroy(self.raw) }
    }
}
unsafe impl Send for Spec {}
unsafe impl Sync for Spec {}
impl Spec {
    /// Parse JSON text; a bad key is named in the error.
    pub fn from_json(json: &str) -> Result<Spec> {
        let ctx = std::sync::Arc::new(CtxBox(Context::new()?));
        let mut raw = ptr::null_mut();
        call(|| unsafe { sys::llmt_spec_parse_json(ctx.0.raw, json.as_ptr() as *const c_char, json.len(), &mut raw) })?;
        Ok(Spec { raw, _ctx: ctx })
    }
    pub fn from_file(path: &Path) -> Result<Spec> {
        let ctx = std::sync::Arc::new(CtxBox(Context::new()?));
        let p = path_cs(path)?;
        let mut raw = ptr::null_mut();
        call(|| unsafe { sys::llmt_spec_parse_file(ctx.0.raw, p.as_ptr(), &mut raw) })?;
        Ok(Spec { raw, _ctx: ctx })
    }
    pub fn get_int(&self, path: &str) -> Result<i64> {
        let p = cs(path)?;
        let mut v = 0i64;
        call(|| unsafe { sys::llmt_spec_get_int(self.raw, p.as_ptr(), &mut v) })?;
        Ok(v)
    }
    pub fn get_double(&self, path: &str) -> Result<f64> {
        let p = cs(path)?;
        let mut v = 0f64;
        call(|| unsafe { sys::llmt_spec_get_double(self.raw, p.as_ptr(), &mut v) })?;
        Ok(v)
    }
    pub fn get_string(&self, path: &str) -> Result<String> {
        let p = cs(path)?;
        text(|b, n, need| unsafe { sys::llmt_spec_get_string(self.raw, p.as_ptr(), b, n, need) })
    }
    /// The normalised spec (defaults filled in) as JSON.
    pub fn to_json(&self) -> Result<String> {
        text(|b, n, need| unsafe { sys::llmt_spec_to_json(self.raw, b, n, need) })
    }
}

// ------------------------------------------------------------------ plan

/// Parallel dimensions (llmt_plan_dim).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Dim {
    Tp = 0,
    Cp = 1,
    Pp = 2,
    Dp = 3,
    Ep = 4,
}

/// A spec placed on world_size ranks (immutable; queries thread-safe).
/// Borrowed plans (`Job::plan`) are tied to the job's lifetime.
pub struct Plan<'a> {
    raw: *mut sys::llmt_plan,
    owned: bool,
    _spec: Option<&'a Spec>,
}
impl Drop for Plan<'_> {
    fn drop(&mut self) {
        if self.owned {
            unsafe { sys::llmt_plan_destroy(self.raw) }
        }
    }
}
unsafe impl Send for Plan<'_> {}
unsafe impl Sync for Plan<'_> {}
impl<'a> Plan<'a> {
    pub fn new(spec: &'a Spec, world_size: i32) -> Result<Plan<'a>> {
        let mut raw = ptr::null_mut();
        call(|| unsafe { sys::llmt_plan_create(spec._ctx.0.raw, spec.raw, world_size, &mut raw) })?;
        Ok(Plan { raw, owned: true, _spec: Some(spec) })
    }
    /// The auto-planner's fastest layout that fits.
    pub fn auto(spec: &'a Spec, world_size: i32) -> Result<Plan<'a>> {
        let mut raw = ptr::null_mut();
        call(|| unsafe { sys::llmt_plan_auto(spec._ctx.0.raw, spec.raw, world_size, ptr::null(), &mut raw) })?;
        Ok(Plan { raw, owned: true, _spec: Some(spec) })
    }
    /// tp, cp, pp, dp, ep.
    pub fn degrees(&self) -> Result<[i32; 5]> {
        let mut d = [0i32; 5];
        call(|| unsafe { sys::llmt_plan_degrees(self.raw, d.as_mut_ptr()) })?;
        Ok(d)
    }
    pub fn world_size(&self) -> Result<i32> {
        let mut v = 0;
        call(|| unsafe { sys::llmt_plan_world_size(self.raw, &mut v) })?;
        Ok(v)
    }
    pub fn coords(&self, rank: i32) -> Result<[i32; 5]> {
        let mut d = [0i32; 5];
        call(|| unsafe { sys::llmt_plan_coords(self.raw, rank, d.as_mut_ptr()) })?;
        Ok(d)
    }
    /// The ranks of `rank`'s group along `dim`, and the group's id.
    pub fn group(&self, dim: Dim, rank: i32) -> Result<(Vec<i32>, i32)> {
        let mut n = 0usize;
        call(|| unsafe { sys::llmt_plan_group(self.raw, dim as i32, rank, ptr::null_mut(), 0, &mut n, ptr::null_mut()) })?;
        let mut v = vec![0i32; n];
        let mut gid = 0;
        call(|| unsafe { sys::llmt_plan_group(self.raw, dim as i32, rank, v.as_mut_ptr(), n, &mut n, &mut gid) })?;
        Ok((v, gid))
    }
    pub fn estimate(&self) -> Result<sys::llmt_plan_estimate> {
        let mut e = sys::llmt_plan_estimate::zeroed();
        e.struct_size = std::mem::size_of_val(&e);
        call(|| unsafe { sys::llmt_plan_get_estimate(self.raw, &mut e) })?;
        Ok(e)
    }
    pub fn to_json(&self) -> Result<String> {
        text(|b, n, need| unsafe { sys::llmt_plan_to_json(self.raw, b, n, need) })
    }
    pub fn explain(&self) -> Result<String> {
        text(|b, n, need| unsafe { sys::llmt_plan_explain(self.raw, b, n, need) })
    }
    /// The same job on another world size (dp changes, the global batch kept).
    pub fn reshape(&self, world_size: i32) -> Result<Plan<'a>> {
        let mut raw = ptr::null_mut();
        call(|| unsafe { sys::llmt_plan_reshape(self.raw, world_size, &mut raw) })?;
        Ok(Plan { raw, owned: true, _spec: self._spec })
    }
}

// ------------------------------------------------------------------ comm

/// One rank's membership of a group: one thread drives it (Send).
pub struct Comm {
    raw: *mut sys::llmt_comm,
}
owned!(Comm, sys::llmt_comm, sys::llmt_comm_destroy);
unsafe impl Send for Comm {}
impl Comm {
    /// From the launcher's environment (mpirun, srun, torchrun variables).
    pub fn from_env() -> Result<Comm> {
        layout_ok()?;
        let mut raw = ptr::null_mut();
        call(|| unsafe { sys::llmt_comm_create_from_env(ptr::null_mut(), ptr::null(), &mut raw) })?;
        Ok(Comm { raw })
    }
    /// `n` ranks in this process, one per thread (move each to its thread).
    pub fn inproc(n: i32) -> Result<Vec<Comm>> {
        layout_ok()?;
        let mut v = vec![ptr::null_mut(); n.max(0) as usize];
        call(|| unsafe { sys::llmt_comm_create_inproc(ptr::null_mut(), n, ptr::null(), v.as_mut_ptr()) })?;
        Ok(v.into_iter().map(|raw| Comm { raw }).collect())
    }
    pub fn rank(&self) -> Result<i32> {
        let mut v = 0;
        call(|| unsafe { sys::llmt_comm_rank(self.raw, &mut v) })?;
        Ok(v)
    }
    pub fn size(&self) -> Result<i32> {
        let mut v = 0;
        call(|| unsafe { sys::llmt_comm_size(self.raw, &mut v) })?;
        Ok(v)
    }
    /// Sum (in place) over the group.
    pub fn all_reduce_sum_f32(&mut self, buf: &mut [f32]) -> Result<()> {
        let p = buf.as_mut_ptr() as *mut c_void;
        call(|| unsafe { sys::llmt_comm_all_reduce(self.raw, p, p, buf.len(), sys::LLMT_DTYPE_FP32, sys::LLMT_REDUCE_SUM, ptr::null_mut()) })
    }
    pub fn barrier(&mut self) -> Result<()> {
        call(|| unsafe { sys::llmt_comm_barrier(self.raw) })
    }
    pub fn abort(&self) -> Result<()> {
        call(|| unsafe { sys::llmt_comm_abort(self.raw) })
    }
}

// ------------------------------------------------------------------ model, trainer

/// A transformer and its parameters (one thread at a time: Send).
pub struct Model {
    raw: *mut sys::llmt_model,
    _ctx: Context,
}
impl Drop for Model {
    fn drop(&mut self) {
        unsafe { sys::llmt_model_destroy(self.raw) }
    }
}
unsafe impl Send for Model {}

/// llmt_model_config with the library's defaults.
pub fn model_config() -> sys::llmt_model_config {
    let mut c = sys::llmt_model_config::zeroed();
    unsafe { sys::llmt_model_config_init(&mut c, std::mem::size_of_val(&c)) };
    c
}

impl Model {
    pub fn new(cfg: &sys::llmt_model_config) -> Result<Model> {
        let ctx = Context::new()?;
        let mut raw = ptr::null_mut();
        call(|| unsafe { sys::llmt_model_create(ctx.raw, cfg, &mut raw) })?;
        Ok(Model { raw, _ctx: ctx })
    }
    pub fn param_count(&self) -> Result<(i32, i64)> {
        let (mut n, mut e) = (0, 0);
        call(|| unsafe { sys::llmt_model_param_count(self.raw, &mut n, &mut e) })?;
        Ok((n, e))
    }
    fn view(&self, index: i32) -> Result<(String, sys::llmt_tensor)> {
        let mut t = sys::llmt_tensor::zeroed();
        t.struct_size = std::mem::size_of_val(&t);
        let mut name: *const c_char = ptr::null();
        call(|| unsafe { sys::llmt_model_param(self.raw, index, &mut name, &mut t) })?;
        Ok((cstr(name), t))
    }
    /// Parameter `index`: its name and its values (the model's memory).
    pub fn param(&self, index: i32) -> Result<(String, &[f32])> {
        let (name, t) = self.view(index)?;
        Ok((name, unsafe { std::slice::from_raw_parts(t.data as *const f32, numel(&t)) }))
    }
    pub fn param_mut(&mut self, index: i32) -> Result<(String, &mut [f32])> {
        let (name, t) = self.view(index)?;
        Ok((name, unsafe { std::slice::from_raw_parts_mut(t.data as *mut f32, numel(&t)) }))
    }
    pub fn save_safetensors(&self, path: &Path) -> Result<()> {
        let p = path_cs(path)?;
        call(|| unsafe { sys::llmt_model_save_safetensors(self.raw, p.as_ptr()) })
    }
    pub fn load_safetensors(&mut self, path: &Path) -> Result<()> {
        let p = path_cs(path)?;
        call(|| unsafe { sys::llmt_model_load_safetensors(self.raw, p.as_ptr()) })
    }
}

fn numel(t: &sys::llmt_tensor) -> usize {
    (0..t.ndim as usize).map(|i| t.shape[i] as usize).product()
}

/// llmt_trainer_opts with the library's defaults (a GPT-style preset).
pub fn trainer_opts() -> sys::llmt_trainer_opts {
    let mut o = sys::llmt_trainer_opts::zeroed();
    unsafe { sys::llmt_trainer_opts_init(&mut o, std::mem::size_of_val(&o)) };
    o
}

/// Steps on host batches; borrows its model mutably for its whole life.
pub struct Trainer<'m> {
    raw: *mut sys::llmt_trainer,
    _model: PhantomData<&'m mut Model>,
}
impl Drop for Trainer<'_> {
    fn drop(&mut self) {
        unsafe { sys::llmt_trainer_destroy(self.raw) }
    }
}
unsafe impl Send for Trainer<'_> {}
impl<'m> Trainer<'m> {
    pub fn new(model: &'m mut Model, opts: &sys::llmt_trainer_opts) -> Result<Trainer<'m>> {
        let mut raw = ptr::null_mut();
        call(|| unsafe { sys::llmt_trainer_create(model.raw, opts, &mut raw) })?;
        Ok(Trainer { raw, _model: PhantomData })
    }
    fn batch(inputs: &[i32], targets: &[i32], seq_len: i32) -> Result<sys::llmt_batch> {
        if inputs.len() != targets.len() || seq_len <= 0 || inputs.len() % seq_len as usize != 0 {
            return Err(Error { status: sys::LLMT_ERR_INVALID_ARGUMENT, message: "inputs and targets: equal lengths, a multiple of seq_len".into() });
        }
        let mut b = sys::llmt_batch::zeroed();
        call(|| unsafe { sys::llmt_batch_init(&mut b, std::mem::size_of_val(&b)) })?;
        b.inputs = inputs.as_ptr();
        b.targets = targets.as_ptr();
        b.seq_len = seq_len;
        b.sequences = (inputs.len() / seq_len as usize) as i32;
        Ok(b)
    }
    /// One optimizer step; steps are numbered from 1 (lr_at(m.step) == m.lr).
    pub fn step(&mut self, inputs: &[i32], targets: &[i32], seq_len: i32) -> Result<sys::llmt_step_metrics> {
        let b = Self::batch(inputs, targets, seq_len)?;
        let mut m = sys::llmt_step_metrics::zeroed();
        call(|| unsafe { sys::llmt_step_metrics_init(&mut m, std::mem::size_of_val(&m)) })?;
        call(|| unsafe { sys::llmt_trainer_step(self.raw, &b, &mut m) })?;
        Ok(m)
    }
    pub fn evaluate(&mut self, inputs: &[i32], targets: &[i32], seq_len: i32) -> Result<f32> {
        let b = Self::batch(inputs, targets, seq_len)?;
        let mut l = 0f32;
        call(|| unsafe { sys::llmt_trainer_evaluate(self.raw, &b, &mut l) })?;
        Ok(l)
    }
    pub fn lr_at(&self, step: i64) -> Result<f32> {
        let mut l = 0f32;
        call(|| unsafe { sys::llmt_trainer_lr_at(self.raw, step, &mut l) })?;
        Ok(l)
    }
    /// Add the trainer's state (parameters, AdamW moments, step) to a save,
    /// zero-copy: the trainer stays borrowed until the save is taken, so it
    /// can neither step nor be dropped before the snapshot.
    pub fn ckpt_add<'d>(&'d mut self, save: &mut Save<'_, 'd>) -> Result<()> {
        call(|| unsafe { sys::llmt_trainer_ckpt_add(self.raw, save.ck.raw) })
    }
    pub fn ckpt_read(&mut self, ck: &mut Checkpoint) -> Result<()> {
        call(|| unsafe { sys::llmt_trainer_ckpt_read(self.raw, ck.raw) })
    }
}

// ------------------------------------------------------------------ checkpoint

/// Tiered asynchronous checkpointing of the host's own slices.
pub struct Checkpoint {
    raw: *mut sys::llmt_ckpt,
    _durable: Option<CString>,
}
owned!(Checkpoint, sys::llmt_ckpt, sys::llmt_ckpt_destroy);
unsafe impl Send for Checkpoint {}

/// Options of a Checkpoint (llmt_ckpt_opts without the hook).
#[derive(Clone, Debug, Default)]
pub struct CheckpointOpts {
    pub rank: i32,
    pub world_size: i32,
    pub keep_last: Option<i32>,
    pub durable_dir: Option<String>,
    pub direct_io: Option<bool>,
}

impl Checkpoint {
    pub fn new(root: &Path, o: &CheckpointOpts) -> Result<Checkpoint> {
        layout_ok()?;
        let mut opts = sys::llmt_ckpt_opts::zeroed();
        call(|| unsafe { sys::llmt_ckpt_opts_init(&mut opts, std::mem::size_of_val(&opts)) })?;
        opts.rank = o.rank;
        opts.world_size = o.world_size.max(1);
        if let Some(k) = o.keep_last {
            opts.keep_last = k;
        }
        if let Some(d) = o.direct_io {
            opts.direct_io = d as i32;
        }
        let durable = match &o.durable_dir { Some(d) => Some(cs(d)?), None => None };
        opts.durable_dir = durable.as_ref().map_or(ptr::null(), |c| c.as_ptr());
        let r = path_cs(root)?;
        let mut raw = ptr::null_mut();
        call(|| unsafe { sys::llmt_ckpt_create(ptr::null_mut(), r.as_ptr(), &opts, &mut raw) })?;
        Ok(Checkpoint { raw, _durable: durable })
    }
    /// Start describing the save of `step`: add tensors to the returned
    /// `Save`, then `Save::save`. What is added stays borrowed until then.
    pub fn begin<'d>(&mut self, step: i64) -> Result<Save<'_, 'd>> {
        call(|| unsafe { sys::llmt_ckpt_begin(self.raw, step) })?;
        Ok(Save { ck: self, step, taken: false, _data: PhantomData })
    }
    /// Wait for the save in flight (an async `Save::save`) and return its result.
    pub fn wait(&mut self) -> Result<()> {
        call(|| unsafe { sys::llmt_ckpt_wait(self.raw, -1) })
    }
    /// Abandon the newest save (`llmt_ckpt_cancel`): one in flight after an
    /// async `Save::save` (the writer stopped, this rank's part removed), or
    /// this rank's part written but not committed; its step is never
    /// committed. `Err` with `LLMT_ERR_STATE` when there is nothing to
    /// cancel or the step was committed first.
    pub fn cancel(&mut self) -> Result<()> {
        call(|| unsafe { sys::llmt_ckpt_cancel(self.raw) })
    }
    pub fn open_latest(&mut self) -> Result<i64> {
        let mut s = 0;
        call(|| unsafe { sys::llmt_ckpt_open_latest(self.raw, &mut s) })?;
        Ok(s)
    }
    pub fn open_step(&mut self, step: i64) -> Result<()> {
        call(|| unsafe { sys::llmt_ckpt_open_step(self.raw, step) })
    }
    pub fn tensors(&mut self) -> Result<Vec<String>> {
        let mut n = 0usize;
        call(|| unsafe { sys::llmt_ckpt_tensor_count(self.raw, &mut n) })?;
        (0..n).map(|i| {
            let mut p: *const c_char = ptr::null();
            call(|| unsafe { sys::llmt_ckpt_tensor_name(self.raw, i, &mut p) })?;
            Ok(cstr(p))
        }).collect()
    }
    /// Global shape of a saved tensor.
    pub fn shape(&mut self, name: &str) -> Result<Vec<i64>> {
        let n = cs(name)?;
        let mut nd = 0;
        let mut sh = [0i64; 8];
        call(|| unsafe { sys::llmt_ckpt_tensor_info(self.raw, n.as_ptr(), ptr::null_mut(), &mut nd, sh.as_mut_ptr(), ptr::null_mut()) })?;
        Ok(sh[..nd as usize].to_vec())
    }
    /// Fill `out` (this rank's block, `shape`) from the global tensor at
    /// `global_offsets`: any sharding of the saved one.
    pub fn read_f32(&mut self, name: &str, out: &mut [f32], shape: &[i64], global_offsets: Option<&[i64]>) -> Result<()> {
        let mut t = sys::llmt_tensor::zeroed();
        call(|| unsafe { sys::llmt_tensor_init(&mut t, std::mem::size_of_val(&t), sys::LLMT_DTYPE_FP32, shape.len() as i32, shape.as_ptr(), out.as_mut_ptr() as *mut c_void, sys::LLMT_DEVICE_CPU, 0) })?;
        if numel(&t) != out.len() {
            return Err(Error { status: sys::LLMT_ERR_INVALID_ARGUMENT, message: format!("{}: shape {:?} is not {} elements", name, shape, out.len()) });
        }
        let n = cs(name)?;
        let go = global_offsets.map_or(ptr::null(), |s| s.as_ptr());
        call(|| unsafe { sys::llmt_ckpt_read(self.raw, n.as_ptr(), &t, go) })
    }
    pub fn get_kv(&mut self, key: &str) -> Result<String> {
        let k = cs(key)?;
        text(|b, n, need| unsafe { sys::llmt_ckpt_get_kv(self.raw, k.as_ptr(), b, n, need) })
    }
    pub fn list(&mut self) -> Result<Vec<i64>> {
        let mut n = 0usize;
        call(|| unsafe { sys::llmt_ckpt_list(self.raw, ptr::null_mut(), 0, &mut n) })?;
        let mut v = vec![0i64; n];
        call(|| unsafe { sys::llmt_ckpt_list(self.raw, v.as_mut_ptr(), n, &mut n) })?;
        v.truncate(n);
        Ok(v)
    }
    pub fn verify(&mut self) -> Result<()> {
        call(|| unsafe { sys::llmt_ckpt_verify(self.raw) })
    }
    pub fn prune(&mut self) -> Result<usize> {
        let mut n = 0usize;
        call(|| unsafe { sys::llmt_ckpt_prune(self.raw, &mut n) })?;
        Ok(n)
    }
}

/// A save being described (from `Checkpoint::begin`): the slices and
/// trainers added to it are borrowed (`'d`) until `save` takes the
/// snapshot, so they can be neither freed nor changed before it: C reads
/// them only then. Dropped without `save`, nothing is saved: Drop drops
/// the description only, and does not call `llmt_ckpt_cancel`, which
/// would also stop an earlier async save still being written (one this
/// `Save` does not own) and whose error a Drop could not report. `cancel`
/// is that call, explicitly.
///
/// ```no_run
/// # use llmtrain::*;
/// # fn f(ck: &mut Checkpoint, tr: Trainer) -> Result<()> {
/// let mut tr = tr;
/// let mut w = vec![1.0f32; 4];
/// let mut s = ck.begin(1)?;
/// s.add_f32("w", &w, &[4], None, None)?;
/// tr.ckpt_add(&mut s)?;
/// s.save(false)?; // the snapshot: w and tr may change or go from here on
/// w[0] = 2.0;
/// drop(tr);
/// # Ok(()) }
/// ```
/// The examples below differ from this one only by the order of the lines
/// (stable rustdoc does not check their error codes). A slice freed before
/// the snapshot does not compile (before, C read the freed memory and saved
/// garbage):
/// ```compile_fail,E0597
/// # use llmtrain::*;
/// # fn f(ck: &mut Checkpoint) -> Result<()> {
/// let mut s = ck.begin(1)?;
/// {
///     let w = vec![1.0f32; 4];
///     s.add_f32("w", &w, &[4], None, None)?;
/// }
/// s.save(false)?;
/// # Ok(()) }
/// ```
/// nor does changing it in between:
/// ```compile_fail,E0502
/// # use llmtrain::*;
/// # fn f(ck: &mut Checkpoint) -> Result<()> {
/// let mut w = vec![1.0f32; 4];
/// let mut s = ck.begin(1)?;
/// s.add_f32("w", &w, &[4], None, None)?;
/// w[0] = 2.0;
/// s.save(false)?;
/// # Ok(()) }
/// ```
/// nor dropping (or stepping) a trainer added to it:
/// ```compile_fail,E0505
/// # use llmtrain::*;
/// # fn f(ck: &mut Checkpoint, tr: Trainer) -> Result<()> {
/// let mut tr = tr;
/// let mut s = ck.begin(1)?;
/// tr.ckpt_add(&mut s)?;
/// drop(tr);
/// s.save(false)?;
/// # Ok(()) }
/// ```
pub struct Save<'c, 'd> {
    ck: &'c mut Checkpoint,
    step: i64,
    taken: bool,
    _data: PhantomData<&'d [f32]>,
}
impl<'c, 'd> Save<'c, 'd> {
    /// Add this rank's block (`shape`) of the global fp32 tensor `name`
    /// (global_shape None: the block's own; global_offsets None: zeros).
    pub fn add_f32(&mut self, name: &str, data: &'d [f32], shape: &[i64], global_shape: Option<&[i64]>, global_offsets: Option<&[i64]>) -> Result<()> {
        let mut t = sys::llmt_tensor::zeroed();
        call(|| unsafe { sys::llmt_tensor_init(&mut t, std::mem::size_of_val(&t), sys::LLMT_DTYPE_FP32, shape.len() as i32, shape.as_ptr(), data.as_ptr() as *mut c_void, sys::LLMT_DEVICE_CPU, 0) })?;
        if numel(&t) != data.len() {
            return Err(Error { status: sys::LLMT_ERR_INVALID_ARGUMENT, message: format!("{}: shape {:?} is not {} elements", name, shape, data.len()) });
        }
        let n = cs(name)?;
        let gs = global_shape.map_or(ptr::null(), |s| s.as_ptr());
        let go = global_offsets.map_or(ptr::null(), |s| s.as_ptr());
        call(|| unsafe { sys::llmt_ckpt_add_tensor(self.ck.raw, n.as_ptr(), &t, gs, go) })
    }
    pub fn set_kv(&mut self, key: &str, value: &str) -> Result<()> {
        let (k, v) = (cs(key)?, cs(value)?);
        call(|| unsafe { sys::llmt_ckpt_set_kv(self.ck.raw, k.as_ptr(), v.as_ptr()) })
    }
    /// Snapshot what was added, then persist (asynchronous: returns after
    /// the snapshot; `Checkpoint::wait` for the rest). Ends the borrows.
    pub fn save(mut self, asynchronous: bool) -> Result<()> {
        self.taken = true;
        call(|| unsafe { sys::llmt_ckpt_save(self.ck.raw, asynchronous as i32) })
    }
    /// Abandon this save (`llmt_ckpt_cancel`): the description is dropped
    /// and, like `Checkpoint::cancel`, an earlier async save still in
    /// flight is stopped and withdrawn too. Ends the borrows.
    pub fn cancel(mut self) -> Result<()> {
        self.taken = true;
        call(|| unsafe { sys::llmt_ckpt_cancel(self.ck.raw) })
    }
}
impl Drop for Save<'_, '_> {
    fn drop(&mut self) {
        if !self.taken {
            // drop the description, whose views may be freed from now on
            unsafe { sys::llmt_ckpt_begin(self.ck.raw, self.step) };
        }
    }
}

// ------------------------------------------------------------------ data

/// A tokenizer (encode: one thread at a time; Send).
pub struct Tokenizer {
    raw: *mut sys::llmt_tokenizer,
}
owned!(Tokenizer, sys::llmt_tokenizer, sys::llmt_tokenizer_destroy);
unsafe impl Send for Tokenizer {}
impl Tokenizer {
    pub fn bytes() -> Result<Tokenizer> {
        layout_ok()?;
        let mut raw = ptr::null_mut();
        call(|| unsafe { sys::llmt_tokenizer_create_bytes(ptr::null_mut(), &mut raw) })?;
        Ok(Tokenizer { raw })
    }
    pub fn train_bpe(text: &str, vocab_size: i32) -> Result<Tokenizer> {
        layout_ok()?;
        let mut raw = ptr::null_mut();
        call(|| unsafe { sys::llmt_tokenizer_train_bpe(ptr::null_mut(), text.as_ptr() as *const c_char, text.len(), vocab_size, &mut raw) })?;
        Ok(Tokenizer { raw })
    }
    pub fn encode(&mut self, text: &str) -> Result<Vec<i32>> {
        let mut n = 0usize;
        let s = unsafe { sys::llmt_tokenizer_encode(self.raw, text.as_ptr() as *const c_char, text.len(), ptr::null_mut(), 0, &mut n) };
        if s != sys::LLMT_OK && s != sys::LLMT_ERR_BUFFER_TOO_SMALL {
            check(s)?;
        }
        let mut v = vec![0i32; n];
        call(|| unsafe { sys::llmt_tokenizer_encode(self.raw, text.as_ptr() as *const c_char, text.len(), v.as_mut_ptr(), n, &mut n) })?;
        Ok(v)
    }
    pub fn decode(&mut self, ids: &[i32]) -> Result<Vec<u8>> {
        let mut n = 0usize;
        let s = unsafe { sys::llmt_tokenizer_decode(self.raw, ids.as_ptr(), ids.len(), ptr::null_mut(), 0, &mut n) };
        if s != sys::LLMT_OK && s != sys::LLMT_ERR_BUFFER_TOO_SMALL {
            check(s)?;
        }
        let mut v = vec![0u8; n];
        call(|| unsafe { sys::llmt_tokenizer_decode(self.raw, ids.as_ptr(), ids.len(), v.as_mut_ptr() as *mut c_char, n, &mut n) })?;
        Ok(v)
    }
    pub fn vocab_size(&self) -> Result<i32> {
        let mut v = 0;
        call(|| unsafe { sys::llmt_tokenizer_vocab_size(self.raw, &mut v) })?;
        Ok(v)
    }
}

/// Token shards opened with mmap.
pub struct Dataset {
    raw: *mut sys::llmt_dataset,
}
owned!(Dataset, sys::llmt_dataset, sys::llmt_dataset_destroy);
unsafe impl Send for Dataset {}
impl Dataset {
    pub fn open(path: &Path) -> Result<Dataset> {
        layout_ok()?;
        let p = path_cs(path)?;
        let mut raw = ptr::null_mut();
        call(|| unsafe { sys::llmt_dataset_open(ptr::null_mut(), p.as_ptr(), 0, &mut raw) })?;
        Ok(Dataset { raw })
    }
    pub fn info(&self) -> Result<sys::llmt_dataset_info> {
        let mut i = sys::llmt_dataset_info::zeroed();
        i.struct_size = std::mem::size_of_val(&i);
        call(|| unsafe { sys::llmt_dataset_get_info(self.raw, &mut i) })?;
        Ok(i)
    }
    /// A deterministic loader over this dataset (borrows it).
    pub fn loader(&mut self, seq_len: i32, micro_batch: i32) -> Result<Loader<'_>> {
        let mut o = sys::llmt_loader_opts::zeroed();
        call(|| unsafe { sys::llmt_loader_opts_init(&mut o, std::mem::size_of_val(&o)) })?;
        o.seq_len = seq_len;
        o.micro_batch = micro_batch;
        let mut raw = ptr::null_mut();
        call(|| unsafe { sys::llmt_loader_create(self.raw, &o, &mut raw) })?;
        Ok(Loader { raw, rows: seq_len as usize * micro_batch as usize, _ds: PhantomData })
    }
}

/// The loader; borrows its dataset.
pub struct Loader<'d> {
    raw: *mut sys::llmt_loader,
    rows: usize,
    _ds: PhantomData<&'d mut Dataset>,
}
impl Drop for Loader<'_> {
    fn drop(&mut self) {
        unsafe { sys::llmt_loader_destroy(self.raw) }
    }
}
unsafe impl Send for Loader<'_> {}
impl Loader<'_> {
    /// The next micro-batch: (inputs, targets).
    pub fn next_batch(&mut self) -> Result<(Vec<i32>, Vec<i32>)> {
        let (mut a, mut b) = (vec![0i32; self.rows], vec![0i32; self.rows]);
        call(|| unsafe { sys::llmt_loader_next(self.raw, a.as_mut_ptr(), b.as_mut_ptr(), ptr::null_mut()) })?;
        Ok((a, b))
    }
    pub fn state(&self) -> Result<sys::llmt_loader_state> {
        let mut s = sys::llmt_loader_state::zeroed();
        s.struct_size = std::mem::size_of_val(&s);
        call(|| unsafe { sys::llmt_loader_get_state(self.raw, &mut s) })?;
        Ok(s)
    }
    pub fn set_state(&mut self, s: &sys::llmt_loader_state) -> Result<()> {
        call(|| unsafe { sys::llmt_loader_set_state(self.raw, s) })
    }
}

// ------------------------------------------------------------------ job

/// Options of a job (llmt_job_opts).
#[derive(Clone, Debug, Default)]
pub struct JobOpts {
    pub run_dir: Option<String>,
    pub world_size: i32,
    pub rank: Option<i32>,
    pub resume: bool,
    pub fresh: bool,
    pub stop_at: i64,
    pub threads: i32,
}

/// One step's metrics (llmt_job_metrics).
pub type JobMetrics = sys::llmt_job_metrics;

/// A whole training run. One thread drives it (Send, not Sync).
pub struct Job {
    raw: *mut sys::llmt_job,
    _spec: Spec, // not needed since the job owns its copy (test spec-owner); kept for old callers
    _ctx: Context,
}
impl Drop for Job {
    fn drop(&mut self) {
        unsafe { sys::llmt_job_destroy(self.raw) }
    }
}
unsafe impl Send for Job {}

/// What a job resolved, with its strings copied out.
#[derive(Clone)]
pub struct JobInfo {
    pub name: String,
    pub run_dir: String,
    pub ckpt_dir: String,
    pub metrics_path: String,
    pub raw: sys::llmt_job_info,
}

impl Job {
    /// A job from spec JSON text (a bad or refused key is named in the error).
    pub fn new(spec_json: &str, o: &JobOpts) -> Result<Job> {
        let spec = Spec::from_json(spec_json)?;
        let ctx = Context::new()?;
        let mut opts = sys::llmt_job_opts::zeroed();
        call(|| unsafe { sys::llmt_job_opts_init(&mut opts, std::mem::size_of_val(&opts)) })?;
        let dir = match &o.run_dir { Some(d) => Some(cs(d)?), None => None };
        opts.run_dir = dir.as_ref().map_or(ptr::null(), |c| c.as_ptr());
        opts.world_size = o.world_size;
        if let Some(r) = o.rank {
            opts.rank = r;
        }
        opts.resume = o.resume as i32;
        opts.fresh = o.fresh as i32;
        opts.stop_at = o.stop_at;
        opts.threads = o.threads;
        let mut raw = ptr::null_mut();
        call(|| unsafe { sys::llmt_job_create(ctx.raw, spec.raw, &opts, &mut raw) })?;
        Ok(Job { raw, _spec: spec, _ctx: ctx })
    }
    pub fn info(&self) -> Result<JobInfo> {
        let mut i = sys::llmt_job_info::zeroed();
        i.struct_size = std::mem::size_of_val(&i);
        call(|| unsafe { sys::llmt_job_get_info(self.raw, &mut i) })?;
        Ok(JobInfo { name: cstr(i.name), run_dir: cstr(i.run_dir), ckpt_dir: cstr(i.ckpt_dir), metrics_path: cstr(i.metrics_path), raw: i })
    }
    /// The job's plan, borrowed from the job.
    pub fn plan(&self) -> Result<Plan<'_>> {
        let mut p: *const sys::llmt_plan = ptr::null();
        call(|| unsafe { sys::llmt_job_get_plan(self.raw, &mut p) })?;
        Ok(Plan { raw: p as *mut _, owned: false, _spec: None })
    }
    fn metrics0() -> JobMetrics {
        let mut m = JobMetrics::zeroed();
        m.struct_size = std::mem::size_of_val(&m);
        m
    }
    pub fn step(&mut self) -> Result<JobMetrics> {
        let mut m = Self::metrics0();
        call(|| unsafe { sys::llmt_job_step(self.raw, &mut m) })?;
        Ok(m)
    }
    /// Steps until stop_at (n <= 0) or n more; then finish.
    pub fn run(&mut self, n: i64) -> Result<JobMetrics> {
        let mut m = Self::metrics0();
        call(|| unsafe { sys::llmt_job_run(self.raw, n, &mut m) })?;
        Ok(m)
    }
    pub fn metrics(&self) -> Result<JobMetrics> {
        let mut m = Self::metrics0();
        call(|| unsafe { sys::llmt_job_get_metrics(self.raw, &mut m) })?;
        Ok(m)
    }
    pub fn save(&mut self, asynchronous: bool) -> Result<()> {
        call(|| unsafe { sys::llmt_job_save(self.raw, asynchronous as i32) })
    }
    pub fn resume(&mut self) -> Result<i64> {
        let mut s = 0;
        call(|| unsafe { sys::llmt_job_resume(self.raw, &mut s) })?;
        Ok(s)
    }
    pub fn evaluate(&mut self) -> Result<f32> {
        let mut v = 0f32;
        call(|| unsafe { sys::llmt_job_evaluate(self.raw, &mut v) })?;
        Ok(v)
    }
    pub fn finish(&mut self) -> Result<()> {
        call(|| unsafe { sys::llmt_job_finish(self.raw) })
    }
    pub fn sample(&mut self) -> Result<String> {
        text(|b, n, need| unsafe { sys::llmt_job_sample(self.raw, b, n, need) })
    }
}

/// An llmt_tensor describing a contiguous f32 slice (borrowing it).
pub fn tensor_f32(data: &mut [f32], shape: &[i64]) -> Result<sys::llmt_tensor> {
    let mut t = sys::llmt_tensor::zeroed();
    call(|| unsafe { sys::llmt_tensor_init(&mut t, std::mem::size_of_val(&t), sys::LLMT_DTYPE_FP32, shape.len() as i32, shape.as_ptr(), data.as_mut_ptr() as *mut c_void, sys::LLMT_DEVICE_CPU, 0) })?;
    Ok(t)
}
