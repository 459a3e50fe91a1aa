//! Rust bindings for libllmtrain: raw `extern "C"` declarations of the C ABI
//! (module `ffi`) and thin safe wrappers. No external crates.
use std::ffi::CStr;
use std::os::raw::{c_char, c_void};

/// The ABI major these declarations were written against.
pub const ABI_MAJOR: u32 = 1;

pub mod ffi {
    use std::os::raw::{c_char, c_int, c_void};

    pub type Status = c_int;
    pub const LLMT_OK: Status = 0;
    pub const LLMT_ERR_INVALID_ARGUMENT: Status = 1;
    pub const LLMT_ERR_NULL_POINTER: Status = 2;
    pub const LLMT_ERR_STRUCT_SIZE: Status = 3;
    pub const LLMT_ERR_TIMEOUT: Status = 13;

    pub const MAX_DIMS: usize = 8;

    #[repr(C)]
    #[derive(Debug, Clone, Copy)]
    pub struct Tensor {
        pub struct_size: usize,
        pub dtype: c_int,
        pub device: c_int,
        pub device_index: i32,
        pub ndim: i32,
        pub shape: [i64; MAX_DIMS],
        pub strides: [i64; MAX_DIMS],
        pub data: *mut c_void,
    }

    extern "C" {
        pub fn llmt_version() -> *const c_char;
        pub fn llmt_version_number() -> u32;
        pub fn llmt_abi_version() -> u32;
        pub fn llmt_status_string(status: Status) -> *const c_char;
        pub fn llmt_build_features() -> u64;
        pub fn llmt_feature_name(bit: u64) -> *const c_char;
        pub fn llmt_dtype_size(dtype: c_int) -> usize;
        pub fn llmt_sizeof(type_id: c_int) -> usize;
        pub fn llmt_context_create(opts: *const c_void, out: *mut *mut c_void) -> Status;
        pub fn llmt_context_destroy(ctx: *mut c_void);
        pub fn llmt_context_last_error(ctx: *const c_void) -> *const c_char;
        pub fn llmt_tensor_init(t: *mut Tensor, struct_size: usize, dtype: c_int,
                                ndim: i32, shape: *const i64, data: *mut c_void,
                                device: c_int, device_index: i32) -> Status;
    }
}

fn cstr(p: *const c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

/// A failing status with its text.
#[derive(Debug, Clone, PartialEq)]
pub struct Error {
    pub status: ffi::Status,
    pub message: String,
}

pub fn check(status: ffi::Status) -> Result<(), Error> {
    if status == ffi::LLMT_OK {
        Ok(())
    } else {
        Err(Error { status, message: status_string(status) })
    }
}

pub fn version() -> String {
    cstr(unsafe { ffi::llmt_version() })
}

pub fn abi_version() -> (u32, u32) {
    let v = unsafe { ffi::llmt_abi_version() };
    (v >> 16, v & 0xffff)
}

pub fn status_string(status: ffi::Status) -> String {
    cstr(unsafe { ffi::llmt_status_string(status) })
}

/// Names of the optional features this build of the library has.
pub fn features() -> Vec<String> {
    let bits = unsafe { ffi::llmt_build_features() };
    (0..64)
        .filter(|b| bits & (1u64 << b) != 0)
        .map(|b| cstr(unsafe { ffi::llmt_feature_name(1u64 << b) }))
        .collect()
}

/// Owns an llmt_context.
pub struct Context {
    raw: *mut c_void,
}

impl Context {
    pub fn new() -> Result<Context, Error> {
        let mut raw: *mut c_void = std::ptr::null_mut();
        check(unsafe { ffi::llmt_context_create(std::ptr::null(), &mut raw) })?;
        Ok(Context { raw })
    }
    pub fn last_error(&self) -> String {
        cstr(unsafe { ffi::llmt_context_last_error(self.raw) })
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        unsafe { ffi::llmt_context_destroy(self.raw) }
    }
}

/// Describe a contiguous f32 slice as an llmt_tensor view (borrowing it).
pub fn tensor_f32(data: &mut [f32], shape: &[i64]) -> Result<ffi::Tensor, Error> {
    let mut t = ffi::Tensor {
        struct_size: 0, dtype: 0, device: 0, device_index: 0, ndim: 0,
        shape: [0; ffi::MAX_DIMS], strides: [0; ffi::MAX_DIMS],
        data: std::ptr::null_mut(),
    };
    check(unsafe {
        ffi::llmt_tensor_init(&mut t, std::mem::size_of::<ffi::Tensor>(), 1,
                              shape.len() as i32, shape.as_ptr(),
                              data.as_mut_ptr() as *mut c_void, 0, 0)
    })?;
    Ok(t)
}
