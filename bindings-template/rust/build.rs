// Link against libllmtrain. LLMT_LIB_DIR points at the directory holding
// libllmtrain.so (a build dir or an install prefix's lib/); without it the
// system linker path is searched.
fn main() {
    println!("cargo:rerun-if-env-changed=LLMT_LIB_DIR");
    if let Ok(dir) = std::env::var("LLMT_LIB_DIR") {
        println!("cargo:rustc-link-search=native={}", dir);
        println!("cargo:rustc-link-arg=-Wl,-rpath,{}", dir);
    }
    println!("cargo:rustc-link-lib=dylib=llmtrain");
}
