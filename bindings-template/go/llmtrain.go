// Package llmtrain: Go bindings for libllmtrain through cgo.
//
// Build with CGO_CFLAGS=-I<llmtrain>/include and CGO_LDFLAGS=-L<libdir>
// (the smoke test's runner sets them), or install the library and header.
package llmtrain

/*
#cgo LDFLAGS: -lllmtrain
#include <stdlib.h>
#include "llmtrain.h"
*/
import "C"

import (
	"fmt"
	"unsafe"
)

// ABIMajor is the ABI major these bindings were written against.
const ABIMajor = 1

// Error is a failing llmt_status with its text.
type Error struct {
	Status  int
	Message string
}

func (e *Error) Error() string { return fmt.Sprintf("llmtrain: %s (status %d)", e.Message, e.Status) }

func check(s C.llmt_status) error {
	if s == C.LLMT_OK {
		return nil
	}
	return &Error{Status: int(s), Message: StatusString(int(s))}
}

// Version of the loaded library, e.g. "0.1.0".
func Version() string { return C.GoString(C.llmt_version()) }

// ABIVersion returns (major, minor).
func ABIVersion() (int, int) {
	v := uint32(C.llmt_abi_version())
	return int(v >> 16), int(v & 0xffff)
}

// StatusString returns the library's text for a status code.
func StatusString(s int) string { return C.GoString(C.llmt_status_string(C.llmt_status(s))) }

// Features lists what this build has ("cuda", "mpi", ...).
func Features() []string {
	bits := uint64(C.llmt_build_features())
	var out []string
	for b := 0; b < 64; b++ {
		if bits&(1<<uint(b)) != 0 {
			out = append(out, C.GoString(C.llmt_feature_name(C.uint64_t(1)<<uint(b))))
		}
	}
	return out
}

// TensorF32 describes a float32 slice as a contiguous llmt_tensor view.
// The slice must stay alive (and pinned by the caller) while the view is used.
func TensorF32(data []float32, shape []int64) (C.llmt_tensor, error) {
	var t C.llmt_tensor
	var p unsafe.Pointer
	if len(data) > 0 {
		p = unsafe.Pointer(&data[0])
	}
	var sp *C.int64_t
	if len(shape) > 0 {
		sp = (*C.int64_t)(unsafe.Pointer(&shape[0]))
	}
	err := check(C.llmt_tensor_init(&t, C.size_t(unsafe.Sizeof(t)), C.LLMT_DTYPE_FP32,
		C.int32_t(len(shape)), sp, p, C.LLMT_DEVICE_CPU, 0))
	return t, err
}

// TensorStrides returns the first n strides of a view.
func TensorStrides(t C.llmt_tensor, n int) []int64 {
	out := make([]int64, n)
	for i := 0; i < n; i++ {
		out[i] = int64(t.strides[i])
	}
	return out
}
