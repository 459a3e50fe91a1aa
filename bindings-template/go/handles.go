package llmtrain

// The other handles (issue 21): Spec, Plan, Model, Trainer, Checkpoint,
// Comm, Tokenizer, Dataset, Loader. Every one has Close (a second Close is
// a no-op; a finalizer is only the safety net), returns *LibError values,
// and refuses use after Close or a nil handle with ErrState / ErrNullPointer
// instead of crashing. C keeps no Go pointer: strings and batches are
// copied into C memory for the call (or, for a checkpoint's added tensors,
// until Save returns); Go slices handed to C are used only during the call.
// A handle made from another one (Trainer from Model, Loader from Dataset)
// is closed by its parent's Close, as the C rule "must not outlive" asks.

/*
#include <stdlib.h>
#include <string.h>
#include "llmtrain.h"
*/
import "C"

import (
	"runtime"
	"sync"
	"unsafe"
)

// closeHook is told of every model, trainer, dataset and loader freed
// (a test counts what finalizers free); a no-op outside tests.
var closeHook = func(kind string) {}

func closedErr(what string) error {
	return &LibError{Status: ErrState, Message: what + ": closed"}
}

func nilErr(what string) error {
	return &LibError{Status: ErrNullPointer, Message: what + ": nil handle"}
}

func newCtx() (*C.llmt_context, error) {
	var ctx *C.llmt_context
	err := call(func() C.llmt_status { return C.llmt_context_create(nil, &ctx) })
	return ctx, err
}

// cText calls a size-query function twice (NULL buffer, then the size).
func cText(f func(buf *C.char, n C.size_t, need *C.size_t) C.llmt_status) (string, error) {
	var need C.size_t
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	f(nil, 0, &need)
	if need == 0 {
		need = 1
	}
	buf := (*C.char)(C.malloc(need))
	defer C.free(unsafe.Pointer(buf))
	if err := call(func() C.llmt_status { return f(buf, need, &need) }); err != nil {
		return "", err
	}
	return C.GoString(buf), nil
}

// ------------------------------------------------------------------ Spec

// Spec is a parsed job spec (immutable; its getters may run concurrently).
type Spec struct {
	ctx  *C.llmt_context
	spec *C.llmt_spec
}

// ParseSpec parses spec JSON; errors name the JSON path and the rule.
func ParseSpec(json string) (*Spec, error) {
	ctx, err := newCtx()
	if err != nil {
		return nil, err
	}
	s := &Spec{ctx: ctx}
	cs := C.CString(json)
	defer C.free(unsafe.Pointer(cs))
	if err := call(func() C.llmt_status {
		return C.llmt_spec_parse_json(ctx, cs, C.size_t(len(json)), &s.spec)
	}); err != nil {
		s.Close()
		return nil, err
	}
	runtime.SetFinalizer(s, (*Spec).Close)
	return s, nil
}

// Close frees the spec; plans made from it keep their own copy.
func (s *Spec) Close() {
	if s == nil {
		return
	}
	C.llmt_spec_destroy(s.spec)
	C.llmt_context_destroy(s.ctx)
	s.spec, s.ctx = nil, nil
	runtime.SetFinalizer(s, nil)
}

func (s *Spec) live() error {
	if s == nil {
		return nilErr("spec")
	}
	if s.spec == nil {
		return closedErr("spec")
	}
	return nil
}

// Int reads an integer, boolean or enum key ("model.layers").
func (s *Spec) Int(path string) (int64, error) {
	if err := s.live(); err != nil {
		return 0, err
	}
	p := C.CString(path)
	defer C.free(unsafe.Pointer(p))
	var v C.int64_t
	err := call(func() C.llmt_status { return C.llmt_spec_get_int(s.spec, p, &v) })
	return int64(v), err
}

// JSON is the normalised spec (every default filled in).
func (s *Spec) JSON() (string, error) {
	if err := s.live(); err != nil {
		return "", err
	}
	return cText(func(b *C.char, n C.size_t, need *C.size_t) C.llmt_status {
		return C.llmt_spec_to_json(s.spec, b, n, need)
	})
}

// ------------------------------------------------------------------ Plan

// Plan is a spec placed on a world size (immutable; queries thread-safe).
// It owns its copy of the spec: the Spec may be closed afterwards.
type Plan struct {
	ctx  *C.llmt_context
	plan *C.llmt_plan
}

// PlanEstimate holds the cost model's main predictions.
type PlanEstimate struct {
	WorldSize, TP, CP, PP, DP                  int
	Params, MemTotal, MemCapacity              float64
	Fits                                       bool
	StepTimeS, TokensPerS, MFU, BubbleFraction float64
	ModelFlopsPerStep, CkptStallS, YoungDalyS  float64
	CkptIntervalSteps                          int64
	GlobalBatch, TokensPerStep                 int64
}

// NewPlan places spec on world ranks (0: the spec's degrees).
func NewPlan(spec *Spec, world int) (*Plan, error) {
	if err := spec.live(); err != nil {
		return nil, err
	}
	ctx, err := newCtx()
	if err != nil {
		return nil, err
	}
	p := &Plan{ctx: ctx}
	if err := call(func() C.llmt_status {
		return C.llmt_plan_create(ctx, spec.spec, C.int32_t(world), &p.plan)
	}); err != nil {
		p.Close()
		return nil, err
	}
	runtime.KeepAlive(spec)
	runtime.SetFinalizer(p, (*Plan).Close)
	return p, nil
}

// Close frees the plan; a second Close is a no-op.
func (p *Plan) Close() {
	if p == nil {
		return
	}
	C.llmt_plan_destroy(p.plan)
	C.llmt_context_destroy(p.ctx)
	p.plan, p.ctx = nil, nil
	runtime.SetFinalizer(p, nil)
}

func (p *Plan) live() error {
	if p == nil {
		return nilErr("plan")
	}
	if p.plan == nil {
		return closedErr("plan")
	}
	return nil
}

// Degrees returns tp, cp, pp, dp, ep.
func (p *Plan) Degrees() ([5]int, error) {
	var out [5]int
	if err := p.live(); err != nil {
		return out, err
	}
	var d [C.LLMT_PLAN_NDIMS]C.int32_t
	err := call(func() C.llmt_status { return C.llmt_plan_degrees(p.plan, &d[0]) })
	for i := range out {
		out[i] = int(d[i])
	}
	return out, err
}

// Coords of a rank: tp, cp, pp, dp, ep.
func (p *Plan) Coords(rank int) ([5]int, error) {
	var out [5]int
	if err := p.live(); err != nil {
		return out, err
	}
	var d [C.LLMT_PLAN_NDIMS]C.int32_t
	err := call(func() C.llmt_status { return C.llmt_plan_coords(p.plan, C.int32_t(rank), &d[0]) })
	for i := range out {
		out[i] = int(d[i])
	}
	return out, err
}

// Estimate is the cost model's prediction for one step.
func (p *Plan) Estimate() (PlanEstimate, error) {
	if err := p.live(); err != nil {
		return PlanEstimate{}, err
	}
	var e C.llmt_plan_estimate
	e.struct_size = C.size_t(unsafe.Sizeof(e))
	err := call(func() C.llmt_status { return C.llmt_plan_get_estimate(p.plan, &e) })
	return PlanEstimate{
		WorldSize: int(e.world_size), TP: int(e.tp), CP: int(e.cp), PP: int(e.pp), DP: int(e.dp),
		Params: float64(e.params), MemTotal: float64(e.mem_total),
		MemCapacity: float64(e.mem_capacity), Fits: e.fits != 0,
		StepTimeS: float64(e.step_time_s), TokensPerS: float64(e.tokens_per_s),
		MFU: float64(e.mfu), BubbleFraction: float64(e.bubble_fraction),
		ModelFlopsPerStep: float64(e.model_flops_per_step), CkptStallS: float64(e.ckpt_stall_s),
		YoungDalyS: float64(e.young_daly_s), CkptIntervalSteps: int64(e.ckpt_interval_steps),
		GlobalBatch: int64(e.global_batch), TokensPerStep: int64(e.tokens_per_step),
	}, err
}

// JSON is the plan as JSON (degrees, groups, stages, the estimate).
func (p *Plan) JSON() (string, error) {
	if err := p.live(); err != nil {
		return "", err
	}
	return cText(func(b *C.char, n C.size_t, need *C.size_t) C.llmt_status {
		return C.llmt_plan_to_json(p.plan, b, n, need)
	})
}

// ----------------------------------------------------------------- Model

// ModelConfig are llmt_model_config's main fields (0: the library default).
type ModelConfig struct {
	Arch                                Arch
	VocabSize, MaxSeqLen, Layers, Width int
	Heads, KVHeads                      int
	Seed                                uint64
}

// Model is a transformer's parameters (one goroutine at a time).
type Model struct {
	ctx   *C.llmt_context
	model *C.llmt_model
	// the C side of its trainers, closed by Close. Not the *Trainer: a
	// Trainer points at its Model, and a cycle of objects with finalizers
	// is never collected (runtime.SetFinalizer), so neither finalizer ran
	trainers []*trainerCore
}

// NewModel creates and initialises a model (seeded, deterministic).
func NewModel(cfg ModelConfig) (*Model, error) {
	ctx, err := newCtx()
	if err != nil {
		return nil, err
	}
	var c C.llmt_model_config
	C.llmt_model_config_init(&c, C.size_t(unsafe.Sizeof(c)))
	c.arch = C.int32_t(cfg.Arch)
	set := func(dst *C.int32_t, v int) {
		if v != 0 {
			*dst = C.int32_t(v)
		}
	}
	set(&c.vocab_size, cfg.VocabSize)
	set(&c.max_seq_len, cfg.MaxSeqLen)
	set(&c.layers, cfg.Layers)
	set(&c.width, cfg.Width)
	set(&c.heads, cfg.Heads)
	set(&c.kv_heads, cfg.KVHeads)
	if cfg.Seed != 0 {
		c.seed = C.uint64_t(cfg.Seed)
	}
	m := &Model{ctx: ctx}
	if err := call(func() C.llmt_status { return C.llmt_model_create(ctx, &c, &m.model) }); err != nil {
		m.Close()
		return nil, err
	}
	runtime.SetFinalizer(m, (*Model).Close)
	return m, nil
}

// Close frees the model and first every trainer made from it.
func (m *Model) Close() {
	if m == nil {
		return
	}
	for _, t := range m.trainers {
		t.close()
	}
	m.trainers = nil
	if m.model != nil {
		closeHook("model")
	}
	C.llmt_model_destroy(m.model)
	C.llmt_context_destroy(m.ctx)
	m.model, m.ctx = nil, nil
	runtime.SetFinalizer(m, nil)
}

func (m *Model) live() error {
	if m == nil {
		return nilErr("model")
	}
	if m.model == nil {
		return closedErr("model")
	}
	return nil
}

// ParamCount returns the number of parameter tensors and of elements.
func (m *Model) ParamCount() (int, int64, error) {
	if err := m.live(); err != nil {
		return 0, 0, err
	}
	var n C.int32_t
	var numel C.int64_t
	err := call(func() C.llmt_status { return C.llmt_model_param_count(m.model, &n, &numel) })
	return int(n), int64(numel), err
}

// Param returns parameter i's name, shape and a []float32 over the model's
// own (C) memory: no copy, writable, valid until the model is closed.
func (m *Model) Param(i int) (string, []int64, []float32, error) {
	if err := m.live(); err != nil {
		return "", nil, nil, err
	}
	var name *C.char
	var t C.llmt_tensor
	t.struct_size = C.size_t(unsafe.Sizeof(t))
	if err := call(func() C.llmt_status { return C.llmt_model_param(m.model, C.int32_t(i), &name, &t) }); err != nil {
		return "", nil, nil, err
	}
	shape := make([]int64, int(t.ndim))
	n := int64(1)
	for d := range shape {
		shape[d] = int64(t.shape[d])
		n *= shape[d]
	}
	return C.GoString(name), shape, unsafe.Slice((*float32)(t.data), n), nil
}

// --------------------------------------------------------------- Trainer

// TrainerOpts are llmt_trainer_opts' main fields (0: the library default,
// a GPT-style preset: cosine schedule, beta2 0.95, weight decay 0.1, clip 1).
type TrainerOpts struct {
	MicroBatch, SeqLen, GradAccum, Threads int
	LR                                     float32
	TotalSteps                             int64
	Schedule                               LrSchedule
	ScheduleSet                            bool // use Schedule even when 0 (constant)
}

// StepMetrics are one step's metrics.
type StepMetrics struct {
	Step     int64
	Loss     float32
	GradNorm float32
	LR       float32
	Seconds  float64
	Tokens   int64
}

// Trainer runs steps on one Model (one goroutine at a time). It is closed
// by its model's Close.
type Trainer struct {
	model *Model // keeps the model alive while the trainer is
	*trainerCore
}

// trainerCore is the C side of a Trainer, also listed by its Model.
type trainerCore struct {
	tr     *C.llmt_trainer
	buf    unsafe.Pointer // C copy of a batch's inputs and targets
	bufLen int
}

func (c *trainerCore) close() {
	if c.tr != nil {
		closeHook("trainer")
	}
	C.llmt_trainer_destroy(c.tr)
	c.tr = nil
	if c.buf != nil {
		C.free(c.buf)
		c.buf = nil
	}
}

// NewTrainer creates a trainer for m.
func NewTrainer(m *Model, o TrainerOpts) (*Trainer, error) {
	if err := m.live(); err != nil {
		return nil, err
	}
	var c C.llmt_trainer_opts
	C.llmt_trainer_opts_init(&c, C.size_t(unsafe.Sizeof(c)))
	if o.MicroBatch != 0 {
		c.micro_batch = C.int32_t(o.MicroBatch)
	}
	if o.SeqLen != 0 {
		c.seq_len = C.int32_t(o.SeqLen)
	}
	if o.GradAccum != 0 {
		c.grad_accum = C.int32_t(o.GradAccum)
	}
	if o.Threads != 0 {
		c.threads = C.int32_t(o.Threads)
	}
	if o.LR != 0 {
		c.lr = C.float(o.LR)
	}
	if o.TotalSteps != 0 {
		c.total_steps = C.int64_t(o.TotalSteps)
	}
	if o.ScheduleSet || o.Schedule != 0 {
		c.schedule = C.int32_t(o.Schedule)
	}
	t := &Trainer{model: m, trainerCore: &trainerCore{}}
	if err := call(func() C.llmt_status { return C.llmt_trainer_create(m.model, &c, &t.tr) }); err != nil {
		return nil, err
	}
	m.trainers = append(m.trainers, t.trainerCore)
	runtime.SetFinalizer(t, (*Trainer).Close)
	return t, nil
}

// Close frees the trainer; a second Close is a no-op.
func (t *Trainer) Close() {
	if t == nil || t.trainerCore == nil {
		return
	}
	t.close()
	runtime.SetFinalizer(t, nil)
}

func (t *Trainer) live() error {
	if t == nil || t.trainerCore == nil {
		return nilErr("trainer")
	}
	if t.tr == nil {
		return closedErr("trainer")
	}
	return nil
}

// batch copies inputs and targets into C memory and describes them.
func (t *Trainer) batch(inputs, targets []int32, seqLen int) (*C.llmt_batch, error) {
	if len(inputs) != len(targets) || seqLen <= 0 || len(inputs)%seqLen != 0 {
		return nil, &LibError{Status: ErrInvalidArgument,
			Message: "trainer: inputs and targets must be equal multiples of seq_len"}
	}
	n := len(inputs)
	need := 2*n*4 + int(unsafe.Sizeof(C.llmt_batch{}))
	if need > t.bufLen {
		if t.buf != nil {
			C.free(t.buf)
		}
		t.buf = C.malloc(C.size_t(need))
		t.bufLen = need
	}
	b := (*C.llmt_batch)(t.buf)
	in := unsafe.Add(t.buf, unsafe.Sizeof(C.llmt_batch{}))
	tg := unsafe.Add(in, n*4)
	if n > 0 {
		copy(unsafe.Slice((*int32)(in), n), inputs)
		copy(unsafe.Slice((*int32)(tg), n), targets)
	}
	C.llmt_batch_init(b, C.size_t(unsafe.Sizeof(*b)))
	b.inputs = (*C.int32_t)(in)
	b.targets = (*C.int32_t)(tg)
	b.sequences = C.int32_t(n / seqLen)
	b.seq_len = C.int32_t(seqLen)
	return b, nil
}

// Step runs one optimizer step on micro_batch*grad_accum rows of seqLen.
func (t *Trainer) Step(inputs, targets []int32, seqLen int) (StepMetrics, error) {
	if err := t.live(); err != nil {
		return StepMetrics{}, err
	}
	b, err := t.batch(inputs, targets, seqLen)
	if err != nil {
		return StepMetrics{}, err
	}
	var m C.llmt_step_metrics
	C.llmt_step_metrics_init(&m, C.size_t(unsafe.Sizeof(m)))
	err = call(func() C.llmt_status { return C.llmt_trainer_step(t.tr, b, &m) })
	return StepMetrics{Step: int64(m.step), Loss: float32(m.loss), GradNorm: float32(m.grad_norm),
		LR: float32(m.lr), Seconds: float64(m.seconds), Tokens: int64(m.tokens)}, err
}

// Evaluate is the mean loss without gradients (ErrNumeric when not finite).
func (t *Trainer) Evaluate(inputs, targets []int32, seqLen int) (float32, error) {
	if err := t.live(); err != nil {
		return 0, err
	}
	b, err := t.batch(inputs, targets, seqLen)
	if err != nil {
		return 0, err
	}
	var loss C.float
	err = call(func() C.llmt_status { return C.llmt_trainer_evaluate(t.tr, b, &loss) })
	return float32(loss), err
}

// CkptAdd adds the trainer's state (parameters, AdamW moments, step) to the
// save being described on ck, zero-copy (the library's own memory): keep
// the trainer open, and do not step it, until ck.Save returns (Save
// refuses with ErrState a trainer closed in between).
func (t *Trainer) CkptAdd(ck *Checkpoint) error {
	if err := t.live(); err != nil {
		return err
	}
	if err := ck.live(); err != nil {
		return err
	}
	err := call(func() C.llmt_status { return C.llmt_trainer_ckpt_add(t.tr, ck.ck) })
	if err == nil {
		ck.trainers = append(ck.trainers, t.trainerCore)
	}
	return err
}

// CkptRead restores the state from the checkpoint open on ck.
func (t *Trainer) CkptRead(ck *Checkpoint) error {
	if err := t.live(); err != nil {
		return err
	}
	if err := ck.live(); err != nil {
		return err
	}
	return call(func() C.llmt_status { return C.llmt_trainer_ckpt_read(t.tr, ck.ck) })
}

// ------------------------------------------------------------ Checkpoint

// CkptOpts are llmt_ckpt_opts' main fields (0: defaults).
type CkptOpts struct {
	Rank, WorldSize, KeepLast int
	DurableDir                string
	Buffered                  bool // no O_DIRECT
}

// Checkpoint saves named tensors asynchronously in tiers and loads them
// under any sharding (one goroutine at a time).
type Checkpoint struct {
	ctx      *C.llmt_context
	ck       *C.llmt_ckpt
	durable  *C.char
	pending  []unsafe.Pointer // C copies of Go slices, freed after Save
	trainers []*trainerCore   // added by Trainer.CkptAdd: open until Save
}

// NewCheckpoint opens (creating) the checkpoint root directory.
func NewCheckpoint(root string, o CkptOpts) (*Checkpoint, error) {
	ctx, err := newCtx()
	if err != nil {
		return nil, err
	}
	k := &Checkpoint{ctx: ctx}
	var c C.llmt_ckpt_opts
	C.llmt_ckpt_opts_init(&c, C.size_t(unsafe.Sizeof(c)))
	c.rank = C.int32_t(o.Rank)
	if o.WorldSize != 0 {
		c.world_size = C.int32_t(o.WorldSize)
	}
	if o.KeepLast != 0 {
		c.keep_last = C.int32_t(o.KeepLast)
	}
	if o.Buffered {
		c.direct_io = 0
	}
	if o.DurableDir != "" {
		k.durable = C.CString(o.DurableDir) // copied by the library; freed at Close
		c.durable_dir = k.durable
	}
	r := C.CString(root)
	defer C.free(unsafe.Pointer(r))
	if err := call(func() C.llmt_status { return C.llmt_ckpt_create(ctx, r, &c, &k.ck) }); err != nil {
		k.Close()
		return nil, err
	}
	runtime.SetFinalizer(k, (*Checkpoint).Close)
	return k, nil
}

// Close waits for a save in flight and frees the handle.
func (k *Checkpoint) Close() {
	if k == nil {
		return
	}
	C.llmt_ckpt_destroy(k.ck)
	C.llmt_context_destroy(k.ctx)
	k.ck, k.ctx = nil, nil
	k.freePending()
	if k.durable != nil {
		C.free(unsafe.Pointer(k.durable))
		k.durable = nil
	}
	runtime.SetFinalizer(k, nil)
}

func (k *Checkpoint) freePending() {
	for _, p := range k.pending {
		C.free(p)
	}
	k.pending = nil
}

func (k *Checkpoint) live() error {
	if k == nil {
		return nilErr("checkpoint")
	}
	if k.ck == nil {
		return closedErr("checkpoint")
	}
	return nil
}

// Begin starts describing the save of step.
func (k *Checkpoint) Begin(step int64) error {
	if err := k.live(); err != nil {
		return err
	}
	k.freePending()
	k.trainers = nil
	return call(func() C.llmt_status { return C.llmt_ckpt_begin(k.ck, C.int64_t(step)) })
}

func i64s(v []int64) (*C.int64_t, func()) {
	if v == nil {
		return nil, func() {}
	}
	p := C.malloc(C.size_t(8 * (len(v) + 1)))
	copy(unsafe.Slice((*int64)(p), len(v)), v)
	return (*C.int64_t)(p), func() { C.free(p) }
}

// AddF32 adds a float32 block of shape `shape` at globalOffsets of a tensor
// of globalShape (nil: the block's own shape, zeros). Go memory cannot be
// lent to C past a call, so the block is copied into C memory held until
// Save returns (Trainer.CkptAdd is zero-copy: the library's own memory).
func (k *Checkpoint) AddF32(name string, data []float32, shape, globalShape, globalOffsets []int64) error {
	if err := k.live(); err != nil {
		return err
	}
	n := int64(1)
	for _, s := range shape {
		n *= s
	}
	if n != int64(len(data)) {
		return &LibError{Status: ErrInvalidArgument, Message: "checkpoint: data length != product of shape"}
	}
	p := C.malloc(C.size_t(4*len(data) + 4))
	copy(unsafe.Slice((*float32)(p), len(data)), data)
	k.pending = append(k.pending, p)
	var t C.llmt_tensor
	sh, f1 := i64s(shape)
	defer f1()
	if err := call(func() C.llmt_status {
		return C.llmt_tensor_init(&t, C.size_t(unsafe.Sizeof(t)), C.LLMT_DTYPE_FP32,
			C.int32_t(len(shape)), sh, p, C.LLMT_DEVICE_CPU, 0)
	}); err != nil {
		return err
	}
	gs, f2 := i64s(globalShape)
	defer f2()
	gof, f3 := i64s(globalOffsets)
	defer f3()
	cn := C.CString(name)
	defer C.free(unsafe.Pointer(cn))
	return call(func() C.llmt_status { return C.llmt_ckpt_add_tensor(k.ck, cn, &t, gs, gof) })
}

// SetKV records a key/value with the save.
func (k *Checkpoint) SetKV(key, value string) error {
	if err := k.live(); err != nil {
		return err
	}
	ck, cv := C.CString(key), C.CString(value)
	defer C.free(unsafe.Pointer(ck))
	defer C.free(unsafe.Pointer(cv))
	return call(func() C.llmt_status { return C.llmt_ckpt_set_kv(k.ck, ck, cv) })
}

// Save snapshots the added tensors; async returns after the snapshot (a
// writer thread persists; Wait for it), else after the commit.
func (k *Checkpoint) Save(async bool) error {
	if err := k.live(); err != nil {
		return err
	}
	for _, t := range k.trainers {
		if t.tr == nil { // its state, added zero-copy, was freed by Close
			return &LibError{Status: ErrState, Message: "checkpoint: save: a trainer " +
				"added by CkptAdd was closed before Save; Begin the save again"}
		}
	}
	a := C.int32_t(0)
	if async {
		a = 1
	}
	err := call(func() C.llmt_status { return C.llmt_ckpt_save(k.ck, a) })
	k.freePending() // the snapshot holds the bytes now
	k.trainers = nil
	return err
}

// Wait for the save in flight (timeoutMs < 0: until it ends).
func (k *Checkpoint) Wait(timeoutMs int64) error {
	if err := k.live(); err != nil {
		return err
	}
	return call(func() C.llmt_status { return C.llmt_ckpt_wait(k.ck, C.int64_t(timeoutMs)) })
}

// Cancel abandons the newest save (llmt_ckpt_cancel): a description begun
// and not saved, a save in flight (its writer stopped, this rank's part
// removed) or a part written but not committed; its step is never
// committed. An error with ErrState when there is nothing to cancel or the
// step was committed first.
func (k *Checkpoint) Cancel() error {
	if err := k.live(); err != nil {
		return err
	}
	err := call(func() C.llmt_status { return C.llmt_ckpt_cancel(k.ck) })
	k.freePending() // a dropped description's copies are not read any more
	k.trainers = nil
	return err
}

// OpenLatest opens the newest committed, valid checkpoint; returns its step.
func (k *Checkpoint) OpenLatest() (int64, error) {
	if err := k.live(); err != nil {
		return 0, err
	}
	var s C.int64_t
	err := call(func() C.llmt_status { return C.llmt_ckpt_open_latest(k.ck, &s) })
	return int64(s), err
}

// ReadF32 fills out (of shape `shape`) with the region at globalOffsets
// (nil: zeros) of the saved tensor, reading only overlapping chunks.
func (k *Checkpoint) ReadF32(name string, out []float32, shape, globalOffsets []int64) error {
	if err := k.live(); err != nil {
		return err
	}
	n := int64(1)
	for _, s := range shape {
		n *= s
	}
	if n != int64(len(out)) || n == 0 {
		return &LibError{Status: ErrInvalidArgument, Message: "checkpoint: out length != product of shape"}
	}
	var t C.llmt_tensor
	sh, f1 := i64s(shape)
	defer f1()
	gof, f2 := i64s(globalOffsets)
	defer f2()
	cn := C.CString(name)
	defer C.free(unsafe.Pointer(cn))
	// cgo forbids passing a struct (the view) that holds a Go pointer: the
	// region is read into C memory, then copied into out
	buf := C.malloc(C.size_t(4 * n))
	defer C.free(buf)
	err := call(func() C.llmt_status {
		if s := C.llmt_tensor_init(&t, C.size_t(unsafe.Sizeof(t)), C.LLMT_DTYPE_FP32,
			C.int32_t(len(shape)), sh, buf, C.LLMT_DEVICE_CPU, 0); s != C.LLMT_OK {
			return s
		}
		return C.llmt_ckpt_read(k.ck, cn, &t, gof)
	})
	if err == nil {
		copy(out, unsafe.Slice((*float32)(buf), n))
	}
	return err
}

// KV reads a key/value of the open checkpoint.
func (k *Checkpoint) KV(key string) (string, error) {
	if err := k.live(); err != nil {
		return "", err
	}
	ck := C.CString(key)
	defer C.free(unsafe.Pointer(ck))
	return cText(func(b *C.char, n C.size_t, need *C.size_t) C.llmt_status {
		return C.llmt_ckpt_get_kv(k.ck, ck, b, n, need)
	})
}

// ------------------------------------------------------------------ Comm

// Comm is one rank's membership of a group. One goroutine drives it;
// Abort may be called from any goroutine.
type Comm struct {
	comm   *C.llmt_comm
	holder *ctxHolder // the group's context, freed with its last rank
}

type ctxHolder struct {
	mu   sync.Mutex
	ctx  *C.llmt_context
	refs int
}

// NewInprocComms makes an in-process group of n ranks (threads of this
// process): drive each from its own goroutine.
func NewInprocComms(n int, timeoutMs int64) ([]*Comm, error) {
	if n <= 0 {
		return nil, &LibError{Status: ErrInvalidArgument, Message: "comm: world size must be > 0"}
	}
	ctx, err := newCtx()
	if err != nil {
		return nil, err
	}
	var o C.llmt_comm_opts
	C.llmt_comm_opts_init(&o, C.size_t(unsafe.Sizeof(o)))
	if timeoutMs > 0 {
		o.timeout_ms = C.int64_t(timeoutMs)
	}
	arr := (**C.llmt_comm)(C.calloc(C.size_t(n), C.size_t(unsafe.Sizeof(uintptr(0)))))
	defer C.free(unsafe.Pointer(arr))
	if err := call(func() C.llmt_status { return C.llmt_comm_create_inproc(ctx, C.int32_t(n), &o, arr) }); err != nil {
		C.llmt_context_destroy(ctx)
		return nil, err
	}
	ptrs := unsafe.Slice(arr, n)
	out := make([]*Comm, n)
	for i := range out {
		out[i] = &Comm{comm: ptrs[i]}
		runtime.SetFinalizer(out[i], (*Comm).Close)
	}
	// the context must outlive every rank: a shared holder frees it last
	h := &ctxHolder{ctx: ctx, refs: n}
	for _, c := range out {
		c.holder = h
	}
	return out, nil
}

// Close frees this rank's handle (waiting for its async work).
func (c *Comm) Close() {
	if c == nil || c.comm == nil {
		return
	}
	C.llmt_comm_destroy(c.comm)
	c.comm = nil
	if c.holder != nil {
		c.holder.mu.Lock()
		c.holder.refs--
		last := c.holder.refs == 0
		c.holder.mu.Unlock()
		if last {
			C.llmt_context_destroy(c.holder.ctx)
		}
		c.holder = nil
	}
	runtime.SetFinalizer(c, nil)
}

func (c *Comm) live() error {
	if c == nil {
		return nilErr("comm")
	}
	if c.comm == nil {
		return closedErr("comm")
	}
	return nil
}

// Rank and Size of this communicator.
func (c *Comm) Rank() (int, error) {
	if err := c.live(); err != nil {
		return 0, err
	}
	var r C.int32_t
	err := call(func() C.llmt_status { return C.llmt_comm_rank(c.comm, &r) })
	return int(r), err
}

func (c *Comm) Size() (int, error) {
	if err := c.live(); err != nil {
		return 0, err
	}
	var r C.int32_t
	err := call(func() C.llmt_status { return C.llmt_comm_size(c.comm, &r) })
	return int(r), err
}

// AllReduceF32 reduces buf in place across the group (collective).
func (c *Comm) AllReduceF32(buf []float32, op ReduceOp) error {
	if err := c.live(); err != nil {
		return err
	}
	if len(buf) == 0 {
		return nil
	}
	p := unsafe.Pointer(&buf[0]) // used during the call only
	return call(func() C.llmt_status {
		return C.llmt_comm_all_reduce(c.comm, p, p, C.size_t(len(buf)), C.LLMT_DTYPE_FP32,
			C.llmt_reduce_op(op), nil)
	})
}

// Barrier waits for every rank (collective).
func (c *Comm) Barrier() error {
	if err := c.live(); err != nil {
		return err
	}
	return call(func() C.llmt_status { return C.llmt_comm_barrier(c.comm) })
}

// Abort stops the group's waiting calls; never blocks (any goroutine).
func (c *Comm) Abort() error {
	if err := c.live(); err != nil {
		return err
	}
	return call(func() C.llmt_status { return C.llmt_comm_abort(c.comm) })
}

// ------------------------------------------------------------- Tokenizer

// Tokenizer encodes text to ids and back. Encode: one goroutine at a time.
type Tokenizer struct {
	ctx *C.llmt_context
	tok *C.llmt_tokenizer
}

func newTok(f func(ctx *C.llmt_context, out **C.llmt_tokenizer) C.llmt_status) (*Tokenizer, error) {
	ctx, err := newCtx()
	if err != nil {
		return nil, err
	}
	t := &Tokenizer{ctx: ctx}
	if err := call(func() C.llmt_status { return f(ctx, &t.tok) }); err != nil {
		t.Close()
		return nil, err
	}
	runtime.SetFinalizer(t, (*Tokenizer).Close)
	return t, nil
}

// NewByteTokenizer: 256 byte tokens + <|endoftext|> (256).
func NewByteTokenizer() (*Tokenizer, error) {
	return newTok(func(ctx *C.llmt_context, out **C.llmt_tokenizer) C.llmt_status {
		return C.llmt_tokenizer_create_bytes(ctx, out)
	})
}

// TrainBPE learns a byte-level BPE of up to vocabSize ids from text.
func TrainBPE(text string, vocabSize int) (*Tokenizer, error) {
	ct := C.CString(text)
	defer C.free(unsafe.Pointer(ct))
	return newTok(func(ctx *C.llmt_context, out **C.llmt_tokenizer) C.llmt_status {
		return C.llmt_tokenizer_train_bpe(ctx, ct, C.size_t(len(text)), C.int32_t(vocabSize), out)
	})
}

// LoadTokenizer reads a tokenizer file of ours.
func LoadTokenizer(path string) (*Tokenizer, error) {
	cp := C.CString(path)
	defer C.free(unsafe.Pointer(cp))
	return newTok(func(ctx *C.llmt_context, out **C.llmt_tokenizer) C.llmt_status {
		return C.llmt_tokenizer_load(ctx, cp, out)
	})
}

// Close frees the tokenizer; a second Close is a no-op.
func (t *Tokenizer) Close() {
	if t == nil {
		return
	}
	C.llmt_tokenizer_destroy(t.tok)
	C.llmt_context_destroy(t.ctx)
	t.tok, t.ctx = nil, nil
	runtime.SetFinalizer(t, nil)
}

func (t *Tokenizer) live() error {
	if t == nil {
		return nilErr("tokenizer")
	}
	if t.tok == nil {
		return closedErr("tokenizer")
	}
	return nil
}

// Save writes the tokenizer to a file.
func (t *Tokenizer) Save(path string) error {
	if err := t.live(); err != nil {
		return err
	}
	cp := C.CString(path)
	defer C.free(unsafe.Pointer(cp))
	return call(func() C.llmt_status { return C.llmt_tokenizer_save(t.tok, cp) })
}

// Encode text (any bytes) to ids.
func (t *Tokenizer) Encode(text string) ([]int32, error) {
	if err := t.live(); err != nil {
		return nil, err
	}
	ct := C.CString(text)
	defer C.free(unsafe.Pointer(ct))
	var n C.size_t
	if err := call(func() C.llmt_status {
		return C.llmt_tokenizer_encode(t.tok, ct, C.size_t(len(text)), nil, 0, &n)
	}); err != nil {
		return nil, err
	}
	ids := make([]int32, int(n)+1)
	err := call(func() C.llmt_status {
		return C.llmt_tokenizer_encode(t.tok, ct, C.size_t(len(text)), (*C.int32_t)(unsafe.Pointer(&ids[0])), C.size_t(len(ids)), &n)
	})
	return ids[:int(n)], err
}

// Decode ids back to text.
func (t *Tokenizer) Decode(ids []int32) (string, error) {
	if err := t.live(); err != nil {
		return "", err
	}
	var p *C.int32_t
	if len(ids) > 0 {
		p = (*C.int32_t)(unsafe.Pointer(&ids[0]))
	}
	var n C.size_t
	if err := call(func() C.llmt_status { return C.llmt_tokenizer_decode(t.tok, p, C.size_t(len(ids)), nil, 0, &n) }); err != nil {
		return "", err
	}
	buf := make([]byte, int(n)+1)
	err := call(func() C.llmt_status {
		return C.llmt_tokenizer_decode(t.tok, p, C.size_t(len(ids)), (*C.char)(unsafe.Pointer(&buf[0])), C.size_t(len(buf)), &n)
	})
	return string(buf[:int(n)]), err
}

// VocabSize is the number of ids.
func (t *Tokenizer) VocabSize() (int, error) {
	if err := t.live(); err != nil {
		return 0, err
	}
	var v C.int32_t
	err := call(func() C.llmt_status { return C.llmt_tokenizer_vocab_size(t.tok, &v) })
	return int(v), err
}

// ----------------------------------------------------- Dataset and Loader

// DatasetInfo describes an opened dataset.
type DatasetInfo struct {
	Shards, VocabSize int
	Tokens, Documents int64
	Fingerprint       uint64
}

// Dataset is a set of token shards opened with mmap. Its Close closes the
// loaders made from it first.
type Dataset struct {
	ctx *C.llmt_context
	ds  *C.llmt_dataset
	// the C side of its loaders (not the *Loader, which points back: a
	// cycle with finalizers is never collected)
	loaders []*loaderCore
}

// OpenDataset opens a shard file, a directory or a glob.
func OpenDataset(path string, verify bool) (*Dataset, error) {
	ctx, err := newCtx()
	if err != nil {
		return nil, err
	}
	d := &Dataset{ctx: ctx}
	cp := C.CString(path)
	defer C.free(unsafe.Pointer(cp))
	v := C.int32_t(0)
	if verify {
		v = 1
	}
	if err := call(func() C.llmt_status { return C.llmt_dataset_open(ctx, cp, v, &d.ds) }); err != nil {
		d.Close()
		return nil, err
	}
	runtime.SetFinalizer(d, (*Dataset).Close)
	return d, nil
}

// Close frees the dataset and its loaders; a second Close is a no-op.
func (d *Dataset) Close() {
	if d == nil {
		return
	}
	for _, l := range d.loaders {
		l.close()
	}
	d.loaders = nil
	if d.ds != nil {
		closeHook("dataset")
	}
	C.llmt_dataset_destroy(d.ds)
	C.llmt_context_destroy(d.ctx)
	d.ds, d.ctx = nil, nil
	runtime.SetFinalizer(d, nil)
}

func (d *Dataset) live() error {
	if d == nil {
		return nilErr("dataset")
	}
	if d.ds == nil {
		return closedErr("dataset")
	}
	return nil
}

// Info: shards, vocabulary, tokens, documents, fingerprint.
func (d *Dataset) Info() (DatasetInfo, error) {
	if err := d.live(); err != nil {
		return DatasetInfo{}, err
	}
	var i C.llmt_dataset_info
	i.struct_size = C.size_t(unsafe.Sizeof(i))
	err := call(func() C.llmt_status { return C.llmt_dataset_get_info(d.ds, &i) })
	return DatasetInfo{Shards: int(i.shards), VocabSize: int(i.vocab_size), Tokens: int64(i.tokens),
		Documents: int64(i.documents), Fingerprint: uint64(i.fingerprint)}, err
}

// LoaderOpts are llmt_loader_opts (0: defaults; Shuffle nil: default on).
type LoaderOpts struct {
	SeqLen, MicroBatch, GradAccum, DPRank, DPSize, Prefetch int
	NoShuffle                                               bool
	Seed                                                    uint64
}

// LoaderState is what a checkpoint keeps of the loader.
type LoaderState struct {
	Seed                           uint64
	Epoch, Cursor, SamplesPerEpoch int64
	Fingerprint                    uint64
	// the window length and order (1 file, 2 shuffled) the cursor counts
	// in; 0: not recorded, not checked (a state saved before they were)
	SeqLen, Order int32
}

// Loader streams one data-parallel rank's micro-batches (one goroutine).
type Loader struct {
	ds *Dataset // keeps the dataset alive while the loader is
	*loaderCore
	seqLen, micro int
}

// loaderCore is the C side of a Loader, also listed by its Dataset.
type loaderCore struct {
	l *C.llmt_loader
}

func (c *loaderCore) close() {
	if c.l != nil {
		closeHook("loader")
	}
	C.llmt_loader_destroy(c.l)
	c.l = nil
}

// NewLoader creates a loader over d.
func NewLoader(d *Dataset, o LoaderOpts) (*Loader, error) {
	if err := d.live(); err != nil {
		return nil, err
	}
	var c C.llmt_loader_opts
	C.llmt_loader_opts_init(&c, C.size_t(unsafe.Sizeof(c)))
	set := func(dst *C.int32_t, v int) {
		if v != 0 {
			*dst = C.int32_t(v)
		}
	}
	set(&c.seq_len, o.SeqLen)
	set(&c.micro_batch, o.MicroBatch)
	set(&c.grad_accum, o.GradAccum)
	set(&c.dp_rank, o.DPRank)
	set(&c.dp_size, o.DPSize)
	set(&c.prefetch, o.Prefetch)
	if o.NoShuffle {
		c.shuffle = 0
	}
	if o.Seed != 0 {
		c.seed = C.uint64_t(o.Seed)
	}
	l := &Loader{ds: d, loaderCore: &loaderCore{}, seqLen: int(c.seq_len), micro: int(c.micro_batch)}
	if err := call(func() C.llmt_status { return C.llmt_loader_create(d.ds, &c, &l.l) }); err != nil {
		return nil, err
	}
	d.loaders = append(d.loaders, l.loaderCore)
	runtime.SetFinalizer(l, (*Loader).Close)
	return l, nil
}

// Close frees the loader (and stops its prefetch thread).
func (l *Loader) Close() {
	if l == nil || l.loaderCore == nil {
		return
	}
	l.close()
	runtime.SetFinalizer(l, nil)
}

func (l *Loader) live() error {
	if l == nil || l.loaderCore == nil {
		return nilErr("loader")
	}
	if l.l == nil {
		return closedErr("loader")
	}
	return nil
}

// Next returns the next micro-batch: micro_batch x seq_len inputs and
// targets (new slices).
func (l *Loader) Next() ([]int32, []int32, error) {
	if err := l.live(); err != nil {
		return nil, nil, err
	}
	n := l.micro * l.seqLen
	in, tg := make([]int32, n), make([]int32, n)
	err := call(func() C.llmt_status {
		return C.llmt_loader_next(l.l, (*C.int32_t)(unsafe.Pointer(&in[0])),
			(*C.int32_t)(unsafe.Pointer(&tg[0])), nil)
	})
	return in, tg, err
}

// State at a step boundary.
func (l *Loader) State() (LoaderState, error) {
	if err := l.live(); err != nil {
		return LoaderState{}, err
	}
	var s C.llmt_loader_state
	s.struct_size = C.size_t(unsafe.Sizeof(s))
	err := call(func() C.llmt_status { return C.llmt_loader_get_state(l.l, &s) })
	return LoaderState{Seed: uint64(s.seed), Epoch: int64(s.epoch), Cursor: int64(s.cursor),
		SamplesPerEpoch: int64(s.samples_per_epoch), Fingerprint: uint64(s.fingerprint),
		SeqLen: int32(s.seq_len), Order: int32(s.order)}, err
}

// SetState continues from a saved state (any dp layout).
func (l *Loader) SetState(st LoaderState) error {
	if err := l.live(); err != nil {
		return err
	}
	var s C.llmt_loader_state
	s.struct_size = C.size_t(unsafe.Sizeof(s))
	s.seed = C.uint64_t(st.Seed)
	s.epoch = C.int64_t(st.Epoch)
	s.cursor = C.int64_t(st.Cursor)
	s.samples_per_epoch = C.int64_t(st.SamplesPerEpoch)
	s.fingerprint = C.uint64_t(st.Fingerprint)
	s.seq_len = C.int32_t(st.SeqLen)
	s.order = C.int32_t(st.Order)
	return call(func() C.llmt_status { return C.llmt_loader_set_state(l.l, &s) })
}

// DataReport is what PrepareData did.
type DataReport struct {
	Documents, Kept, TrainTokens, ValTokens int64
	TrainShards, ValShards                  int
}

// PrepareData ingests, filters, deduplicates and tokenizes `inputs` (files
// or directories) into token shards under outDir (train/, val/).
func PrepareData(inputs []string, tok *Tokenizer, outDir string, valFraction float64) (DataReport, error) {
	if err := tok.live(); err != nil {
		return DataReport{}, err
	}
	ctx, err := newCtx()
	if err != nil {
		return DataReport{}, err
	}
	defer C.llmt_context_destroy(ctx)
	n := len(inputs)
	arr := (**C.char)(C.calloc(C.size_t(n+1), C.size_t(unsafe.Sizeof(uintptr(0)))))
	defer C.free(unsafe.Pointer(arr))
	ps := unsafe.Slice(arr, n+1)
	for i, s := range inputs {
		ps[i] = C.CString(s)
		defer C.free(unsafe.Pointer(ps[i]))
	}
	var o C.llmt_data_prepare_opts
	C.llmt_data_prepare_opts_init(&o, C.size_t(unsafe.Sizeof(o)))
	if valFraction > 0 {
		o.val_fraction = C.double(valFraction)
	}
	var r C.llmt_data_report
	r.struct_size = C.size_t(unsafe.Sizeof(r))
	od := C.CString(outDir)
	defer C.free(unsafe.Pointer(od))
	err = call(func() C.llmt_status {
		return C.llmt_data_prepare(ctx, arr, C.size_t(n), tok.tok, od, &o, &r)
	})
	return DataReport{Documents: int64(r.documents), Kept: int64(r.verdicts[0]),
		TrainTokens: int64(r.train_tokens), ValTokens: int64(r.val_tokens),
		TrainShards: int(r.train_shards), ValShards: int(r.val_shards)}, err
}
