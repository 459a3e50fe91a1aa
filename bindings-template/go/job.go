package llmtrain

/*
#include <stdlib.h>
#include "llmtrain.h"
*/
import "C"

import (
	"fmt"
	"runtime"
	"unsafe"
)

// LibError is a failing status with the library's message for it (the
// calling thread's llmt_last_error; the OS thread is locked during a call).
type LibError struct {
	Status  Status
	Message string
}

func (e *LibError) Error() string {
	return fmt.Sprintf("llmtrain: %s (status %d): %s", StatusString(int(e.Status)), e.Status, e.Message)
}

// call runs f on a locked OS thread so llmt_last_error is this call's.
func call(f func() C.llmt_status) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	C.llmt_last_error_clear()
	s := f()
	if s == C.LLMT_OK {
		return nil
	}
	msg := ""
	if C.llmt_last_error_status() == s {
		msg = C.GoString(C.llmt_last_error())
	}
	return &LibError{Status: Status(s), Message: msg}
}

// CheckLayout compares cgo's view of every struct with the generated table
// and, for structs with an id, with llmt_sizeof of the loaded library.
func CheckLayout() error {
	got := cgoLayout()
	for i, g := range generatedLayout {
		c := got[i]
		if c.Name != g.Name || c.Size != g.Size || len(c.Fields) != len(g.Fields) {
			return fmt.Errorf("layout of %s: cgo %d bytes, generated %d", g.Name, c.Size, g.Size)
		}
		for j := range g.Fields {
			if c.Fields[j] != g.Fields[j] {
				return fmt.Errorf("layout of %s.%s differs", g.Name, g.Fields[j].Name)
			}
		}
		if g.TypeID > 0 && uintptr(C.llmt_sizeof(C.llmt_type_id(g.TypeID))) != g.Size {
			return fmt.Errorf("%s: %d bytes here, %d in the library", g.Name, g.Size,
				C.llmt_sizeof(C.llmt_type_id(g.TypeID)))
		}
	}
	return nil
}

// LayoutText is the layout in layout_ref's format ("S SIZE", "S.F OFF").
func LayoutText() string {
	out := ""
	for _, s := range cgoLayout() {
		out += fmt.Sprintf("%s %d\n", s.Name, s.Size)
		for _, f := range s.Fields {
			out += fmt.Sprintf("%s.%s %d\n", s.Name, f.Name, f.Offset)
		}
	}
	return out
}

// JobOpts are llmt_job_opts.
type JobOpts struct {
	RunDir string
	Resume bool
	StopAt int64
}

// Job is a whole training run. Close frees it (a finalizer is the safety
// net); one goroutine drives it. C keeps no Go pointer: strings are copied
// into C memory for the call only.
type Job struct {
	ctx  *C.llmt_context
	spec *C.llmt_spec
	job  *C.llmt_job
}

// JobMetrics are one step's metrics.
type JobMetrics struct {
	Step       int64
	Loss       float32
	GradNorm   float32
	LR         float32
	Events     uint32
	StepS      float64 // wall time of the step
	TokensPerS float64 // this rank's
	MFU        float64
	ValLoss    float32 // NaN unless Events has JobEventValidated (zz_generated.go)
	SavedStep  int64   // -1 unless Events has JobEventSaved
}

// NewJob parses spec JSON and creates the job (errors name the bad key).
func NewJob(spec string, o JobOpts) (*Job, error) {
	if err := CheckLayout(); err != nil {
		return nil, err
	}
	j := &Job{}
	if err := call(func() C.llmt_status { return C.llmt_context_create(nil, &j.ctx) }); err != nil {
		return nil, err
	}
	cs := C.CString(spec)
	defer C.free(unsafe.Pointer(cs))
	if err := call(func() C.llmt_status { return C.llmt_spec_parse_json(j.ctx, cs, C.size_t(len(spec)), &j.spec) }); err != nil {
		j.Close()
		return nil, err
	}
	var opts C.llmt_job_opts
	C.llmt_job_opts_init(&opts, C.size_t(unsafe.Sizeof(opts)))
	if o.RunDir != "" {
		d := C.CString(o.RunDir)
		defer C.free(unsafe.Pointer(d))
		opts.run_dir = d
	}
	if o.Resume {
		opts.resume = 1
	}
	opts.stop_at = C.int64_t(o.StopAt)
	if err := call(func() C.llmt_status { return C.llmt_job_create(j.ctx, j.spec, &opts, &j.job) }); err != nil {
		j.Close()
		return nil, err
	}
	runtime.SetFinalizer(j, (*Job).Close)
	return j, nil
}

// Close frees the job; a second Close (or one on a nil *Job) is a no-op.
func (j *Job) Close() {
	if j == nil {
		return
	}
	if j.job != nil {
		C.llmt_job_destroy(j.job)
		j.job = nil
	}
	if j.spec != nil {
		C.llmt_spec_destroy(j.spec)
		j.spec = nil
	}
	if j.ctx != nil {
		C.llmt_context_destroy(j.ctx)
		j.ctx = nil
	}
	runtime.SetFinalizer(j, nil)
}

func (j *Job) live() error {
	if j == nil {
		return nilErr("job")
	}
	if j.job == nil {
		return closedErr("job")
	}
	return nil
}

func toMetrics(m *C.llmt_job_metrics) JobMetrics {
	return JobMetrics{Step: int64(m.step), Loss: float32(m.loss), GradNorm: float32(m.grad_norm),
		LR: float32(m.lr), Events: uint32(m.events), StepS: float64(m.step_s),
		TokensPerS: float64(m.tokens_per_s), MFU: float64(m.mfu), ValLoss: float32(m.val_loss),
		SavedStep: int64(m.saved_step)}
}

// Step runs one optimizer step.
func (j *Job) Step() (JobMetrics, error) {
	if err := j.live(); err != nil {
		return JobMetrics{}, err
	}
	var m C.llmt_job_metrics
	m.struct_size = C.size_t(unsafe.Sizeof(m))
	err := call(func() C.llmt_status { return C.llmt_job_step(j.job, &m) })
	return toMetrics(&m), err
}

// Run steps until stop_at (n <= 0) or n more, then finishes.
func (j *Job) Run(n int64) (JobMetrics, error) {
	if err := j.live(); err != nil {
		return JobMetrics{}, err
	}
	var m C.llmt_job_metrics
	m.struct_size = C.size_t(unsafe.Sizeof(m))
	err := call(func() C.llmt_status { return C.llmt_job_run(j.job, C.int64_t(n), &m) })
	return toMetrics(&m), err
}

// Save writes a checkpoint of the current step.
func (j *Job) Save(async bool) error {
	if err := j.live(); err != nil {
		return err
	}
	a := C.int32_t(0)
	if async {
		a = 1
	}
	return call(func() C.llmt_status { return C.llmt_job_save(j.job, a) })
}

// StartStep is the step the job resumed from (0 for a new run).
func (j *Job) StartStep() (int64, error) {
	if err := j.live(); err != nil {
		return 0, err
	}
	var i C.llmt_job_info
	i.struct_size = C.size_t(unsafe.Sizeof(i))
	err := call(func() C.llmt_status { return C.llmt_job_get_info(j.job, &i) })
	return int64(i.start_step), err
}
