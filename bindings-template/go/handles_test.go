package llmtrain

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

func status(err error) Status {
	var le *LibError
	if errors.As(err, &le) {
		return le.Status
	}
	return -1
}

// Misuse: a nil handle, use after Close, double Close, a child used after
// its parent's Close: an error value every time, never a crash.
func TestHandlesMisuse(t *testing.T) {
	var sp *Spec
	var pl *Plan
	var m *Model
	var tr *Trainer
	var ck *Checkpoint
	var c *Comm
	var tok *Tokenizer
	var ds *Dataset
	var ld *Loader
	nilErrs := []error{}
	_, e := sp.Int("model.layers")
	nilErrs = append(nilErrs, e)
	_, e = NewPlan(nil, 1)
	nilErrs = append(nilErrs, e)
	_, e = pl.Degrees()
	nilErrs = append(nilErrs, e)
	_, _, e = m.ParamCount()
	nilErrs = append(nilErrs, e)
	_, e = NewTrainer(nil, TrainerOpts{})
	nilErrs = append(nilErrs, e)
	_, e = tr.Step([]int32{1}, []int32{1}, 1)
	nilErrs = append(nilErrs, e)
	nilErrs = append(nilErrs, ck.Begin(1), tr.CkptAdd(nil), c.Barrier())
	_, e = tok.Encode("x")
	nilErrs = append(nilErrs, e)
	_, e = ds.Info()
	nilErrs = append(nilErrs, e)
	_, e = NewLoader(nil, LoaderOpts{})
	nilErrs = append(nilErrs, e)
	_, _, e = ld.Next()
	nilErrs = append(nilErrs, e)
	for i, e := range nilErrs {
		if status(e) != ErrNullPointer || !strings.Contains(e.Error(), "nil handle") {
			t.Errorf("nil handle case %d: %v", i, e)
		}
	}
	// nil Close is a no-op
	sp.Close()
	pl.Close()
	m.Close()
	tr.Close()
	ck.Close()
	c.Close()
	tok.Close()
	ds.Close()
	ld.Close()

	// a trainer closed by its model's Close, then used: ErrState
	m, err := NewModel(ModelConfig{VocabSize: 64, MaxSeqLen: 8, Layers: 1, Width: 16, Heads: 2})
	if err != nil {
		t.Fatal(err)
	}
	tr, err = NewTrainer(m, TrainerOpts{MicroBatch: 1, SeqLen: 8, Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	m.Close()
	m.Close()
	if _, err := tr.Step(make([]int32, 8), make([]int32, 8), 8); status(err) != ErrState {
		t.Errorf("trainer after model Close: %v", err)
	}
	if _, _, err := m.ParamCount(); status(err) != ErrState || !strings.Contains(err.Error(), "model: closed") {
		t.Errorf("model after Close: %v", err)
	}
	tr.Close()

	tok, err = NewByteTokenizer()
	if err != nil {
		t.Fatal(err)
	}
	tok.Close()
	tok.Close()
	if _, err := tok.Encode("x"); status(err) != ErrState {
		t.Errorf("tokenizer after Close: %v", err)
	}
	ck, err = NewCheckpoint(t.TempDir(), CkptOpts{})
	if err != nil {
		t.Fatal(err)
	}
	ck.Close()
	ck.Close()
	if err := ck.Save(false); status(err) != ErrState {
		t.Errorf("checkpoint after Close: %v", err)
	}
	// the library's own errors carry its message
	if _, err := NewModel(ModelConfig{Width: 30, Heads: 7}); err == nil || !strings.Contains(err.Error(), "heads") {
		t.Errorf("bad model config: %v", err)
	}
	if _, err := OpenDataset(filepath.Join(t.TempDir(), "none"), false); err == nil || status(err) == ErrState {
		t.Errorf("missing dataset: %v", err)
	}
	if _, err := ParseSpec(`{"model": {"no_such_key": 1}}`); err == nil || !strings.Contains(err.Error(), "no_such_key") {
		t.Errorf("bad spec key: %v", err)
	}
}

// A spec, a plan that outlives it, the estimate and coordinates.
func TestPlan(t *testing.T) {
	sp, err := ParseSpec(`{"model": {"layers": 4, "hidden": 256, "heads": 8, "vocab": 1000, "seq_len": 128},
	  "parallelism": {"tp": 2, "pp": 2}, "batch": {"micro": 1, "grad_accum": 4}}`)
	if err != nil {
		t.Fatal(err)
	}
	if v, err := sp.Int("model.layers"); err != nil || v != 4 {
		t.Fatalf("model.layers: %v %v", v, err)
	}
	p, err := NewPlan(sp, 8)
	if err != nil {
		t.Fatal(err)
	}
	sp.Close() // the plan owns its copy
	d, err := p.Degrees()
	if err != nil || d != [5]int{2, 1, 2, 2, 1} {
		t.Fatalf("degrees %v %v", d, err)
	}
	c, err := p.Coords(5) // tp innermost, then cp, pp, dp
	if err != nil || c[0] != 1 || c[2] != 0 || c[3] != 1 {
		t.Fatalf("coords of 5: %v %v", c, err)
	}
	e, err := p.Estimate()
	if err != nil || e.WorldSize != 8 || e.Params <= 0 || e.StepTimeS <= 0 || e.GlobalBatch != 8 {
		t.Fatalf("estimate %+v %v", e, err)
	}
	if _, err := p.Coords(8); err == nil || status(err) != ErrInvalidArgument {
		t.Errorf("rank 8 of 8: %v", err)
	}
	js, err := p.JSON()
	if err != nil || !strings.Contains(js, "\"tp\"") {
		t.Errorf("plan json: %v", err)
	}
	p.Close()
	p.Close()
	if _, err := p.Degrees(); status(err) != ErrState {
		t.Errorf("plan after Close: %v", err)
	}
}

// Two in-process ranks on two goroutines: an all-reduce.
func TestComm(t *testing.T) {
	comms, err := NewInprocComms(2, 20000)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	out := make([][]float32, 2)
	errs := make([]error, 2)
	for r := range comms {
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			buf := []float32{float32(r + 1), float32(10 * (r + 1))}
			errs[r] = comms[r].AllReduceF32(buf, ReduceOp(0))
			out[r] = buf
		}(r)
	}
	wg.Wait()
	for r := range comms {
		if errs[r] != nil || out[r][0] != 3 || out[r][1] != 30 {
			t.Fatalf("rank %d: %v %v", r, out[r], errs[r])
		}
		if n, err := comms[r].Size(); err != nil || n != 2 {
			t.Fatalf("size %d %v", n, err)
		}
		comms[r].Close()
		comms[r].Close()
	}
	if err := comms[0].Barrier(); status(err) != ErrState {
		t.Errorf("comm after Close: %v", err)
	}
	if _, err := NewInprocComms(0, 0); err == nil {
		t.Errorf("0 ranks accepted")
	}
}

// The data pipeline and a trainer with a checkpoint: 6 steps uninterrupted
// equal 4 steps + save + a new model/trainer/loader resumed for 2; tensors
// saved by 2 ranks in halves, read whole by 1.
func TestTrainCheckpoint(t *testing.T) {
	src := os.Getenv("LLMT_SOURCE_ROOT")
	if src == "" {
		t.Skip("LLMT_SOURCE_ROOT not set")
	}
	tmp := t.TempDir()
	tok, err := NewByteTokenizer()
	if err != nil {
		t.Fatal(err)
	}
	defer tok.Close()
	ids, err := tok.Encode("héllo, wörld")
	if err != nil {
		t.Fatal(err)
	}
	if back, err := tok.Decode(ids); err != nil || back != "héllo, wörld" {
		t.Fatalf("decode: %q %v", back, err)
	}
	if vs, _ := tok.VocabSize(); vs != 257 {
		t.Fatalf("byte vocab %d", vs)
	}
	data := filepath.Join(tmp, "data")
	rep, err := PrepareData([]string{filepath.Join(src, "doc")}, tok, data, 0.05)
	if err != nil || rep.TrainTokens == 0 || rep.TrainShards == 0 {
		t.Fatalf("prepare: %+v %v", rep, err)
	}
	const T, B = 16, 2
	type run struct {
		ds *Dataset
		ld *Loader
		m  *Model
		tr *Trainer
	}
	open := func() run {
		ds, err := OpenDataset(filepath.Join(data, "train"), true)
		if err != nil {
			t.Fatal(err)
		}
		ld, err := NewLoader(ds, LoaderOpts{SeqLen: T, MicroBatch: B, Seed: 5})
		if err != nil {
			t.Fatal(err)
		}
		m, err := NewModel(ModelConfig{VocabSize: 257, MaxSeqLen: T, Layers: 1, Width: 32, Heads: 2, Seed: 9})
		if err != nil {
			t.Fatal(err)
		}
		tr, err := NewTrainer(m, TrainerOpts{MicroBatch: B, SeqLen: T, Threads: 1, LR: 1e-2, TotalSteps: 6})
		if err != nil {
			t.Fatal(err)
		}
		return run{ds, ld, m, tr}
	}
	step := func(r run) float32 {
		in, tg, err := r.ld.Next()
		if err != nil {
			t.Fatal(err)
		}
		s, err := r.tr.Step(in, tg, T)
		if err != nil {
			t.Fatal(err)
		}
		return s.Loss
	}
	a := open()
	var full []float32
	for i := 0; i < 6; i++ {
		full = append(full, step(a))
	}
	a.ds.Close() // closes its loader
	a.m.Close()  // closes its trainer
	if _, _, err := a.ld.Next(); status(err) != ErrState {
		t.Errorf("loader after dataset Close: %v", err)
	}

	root := filepath.Join(tmp, "ckpt")
	b := open()
	for i := 0; i < 4; i++ {
		if l := step(b); l != full[i] {
			t.Fatalf("step %d: %v vs %v", i+1, l, full[i])
		}
	}
	ck, err := NewCheckpoint(root, CkptOpts{Buffered: true, DurableDir: filepath.Join(tmp, "durable")})
	if err != nil {
		t.Fatal(err)
	}
	st, _ := b.ld.State()
	if err := ck.Begin(4); err != nil {
		t.Fatal(err)
	}
	if err := b.tr.CkptAdd(ck); err != nil {
		t.Fatal(err)
	}
	ck.SetKV("loader.cursor", fmt.Sprint(st.Cursor))
	ck.SetKV("loader.epoch", fmt.Sprint(st.Epoch))
	if err := ck.Save(true); err != nil {
		t.Fatal(err)
	}
	step(b) // training goes on while the writer persists
	if err := ck.Wait(-1); err != nil {
		t.Fatal(err)
	}
	ck.Close()
	b.ds.Close()
	b.m.Close()

	c := open()
	defer c.ds.Close()
	defer c.m.Close()
	rd, err := NewCheckpoint(root, CkptOpts{})
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	if s, err := rd.OpenLatest(); err != nil || s != 4 {
		t.Fatalf("open latest: %d %v", s, err)
	}
	if err := c.tr.CkptRead(rd); err != nil {
		t.Fatal(err)
	}
	cur, _ := rd.KV("loader.cursor")
	ep, _ := rd.KV("loader.epoch")
	var st2 LoaderState
	st2 = st
	fmt.Sscan(cur, &st2.Cursor)
	fmt.Sscan(ep, &st2.Epoch)
	if err := c.ld.SetState(st2); err != nil {
		t.Fatal(err)
	}
	for i := 4; i < 6; i++ {
		if l := step(c); l != full[i] {
			t.Fatalf("resumed step %d: loss %v, uninterrupted %v", i+1, l, full[i])
		}
	}
	_, shape, p0, err := c.m.Param(0)
	if err != nil || len(p0) == 0 || len(shape) == 0 {
		t.Fatalf("param view: %v", err)
	}

	// resharding: 2 ranks each save one half of a 4x3 tensor; 1 reads it
	root2 := filepath.Join(tmp, "halves")
	full12 := make([]float32, 12)
	for i := range full12 {
		full12[i] = float32(i) * 0.5
	}
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for r := 0; r < 2; r++ {
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			k, err := NewCheckpoint(root2, CkptOpts{Rank: r, WorldSize: 2, Buffered: true})
			if err != nil {
				errs[r] = err
				return
			}
			defer k.Close()
			if err := k.Begin(1); err != nil {
				errs[r] = err
				return
			}
			if err := k.AddF32("w", full12[r*6:(r+1)*6], []int64{2, 3}, []int64{4, 3}, []int64{int64(2 * r), 0}); err != nil {
				errs[r] = err
				return
			}
			errs[r] = k.Save(false)
		}(r)
	}
	wg.Wait()
	if errs[0] != nil || errs[1] != nil {
		t.Fatalf("2-rank save: %v %v", errs[0], errs[1])
	}
	one, err := NewCheckpoint(root2, CkptOpts{})
	if err != nil {
		t.Fatal(err)
	}
	defer one.Close()
	if _, err := one.OpenLatest(); err != nil {
		t.Fatal(err)
	}
	got := make([]float32, 12)
	if err := one.ReadF32("w", got, []int64{4, 3}, nil); err != nil {
		t.Fatal(err)
	}
	for i := range got {
		if got[i] != full12[i] {
			t.Fatalf("resharded read: %v", got)
		}
	}
	mid := make([]float32, 6) // rows 1..2: across both ranks' blocks
	if err := one.ReadF32("w", mid, []int64{2, 3}, []int64{1, 0}); err != nil || mid[0] != full12[3] || mid[5] != full12[8] {
		t.Fatalf("rows 1-2: %v %v", mid, err)
	}
	if err := one.ReadF32("nope", mid, []int64{2, 3}, nil); status(err) != ErrNotFound || !strings.Contains(err.Error(), "nope") {
		t.Errorf("missing tensor: %v", err)
	}
	t.Logf("losses %v; resumed at 4 equal; halves of 2 ranks read by 1", full)
}

// Cancel abandons the newest save: nothing to cancel and a committed step
// are errors naming the state; a described save leaves nothing; a resume
// opens the last committed step.
func TestCheckpointCancel(t *testing.T) {
	root := t.TempDir()
	ck, err := NewCheckpoint(root, CkptOpts{})
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	if err := ck.Cancel(); status(err) != ErrState || !strings.Contains(err.Error(), "nothing was begun") {
		t.Errorf("cancel with nothing begun: %v", err)
	}
	w := []float32{1, 2, 3, 4}
	save := func(step int64, async bool) error {
		if err := ck.Begin(step); err != nil {
			return err
		}
		if err := ck.AddF32("w", w, []int64{4}, nil, nil); err != nil {
			return err
		}
		return ck.Save(async)
	}
	if err := save(1, false); err != nil {
		t.Fatal(err)
	}
	if err := ck.Cancel(); status(err) != ErrState || !strings.Contains(err.Error(), "step 1 was committed") {
		t.Errorf("cancel after the commit: %v", err)
	}
	if err := ck.Begin(2); err != nil {
		t.Fatal(err)
	}
	if err := ck.AddF32("w", w, []int64{4}, nil, nil); err != nil {
		t.Fatal(err)
	}
	if err := ck.Cancel(); err != nil {
		t.Errorf("cancel of a described save: %v", err)
	}
	if err := ck.Save(false); status(err) != ErrState {
		t.Errorf("save after cancel (no description): %v", err)
	}
	if _, err := os.Stat(filepath.Join(root, "step-000000000002")); !os.IsNotExist(err) {
		t.Errorf("step 2 written after its cancel: %v", err)
	}
	if err := save(3, true); err != nil {
		t.Fatal(err)
	}
	want := int64(1)
	if err := ck.Cancel(); err != nil { // the writer committed before the cancel reached it
		if status(err) != ErrState || !strings.Contains(err.Error(), "step 3 was committed") {
			t.Errorf("cancel of an async save: %v", err)
		}
		want = 3
	} else if _, err := os.Stat(filepath.Join(root, "step-000000000003")); !os.IsNotExist(err) {
		t.Errorf("step 3 left after its cancel: %v", err)
	}
	rd, err := NewCheckpoint(root, CkptOpts{})
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	if got, err := rd.OpenLatest(); err != nil || got != want {
		t.Errorf("resume opened step %d (%v), want %d", got, err, want)
	}
}
