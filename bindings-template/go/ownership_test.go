package llmtrain

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// A nil *Job is ErrNullPointer like every other nil handle (it said
// "job: closed", ErrState), and its Close is a no-op.
func TestNilJob(t *testing.T) {
	var j *Job
	if _, err := j.Step(); status(err) != ErrNullPointer || !strings.Contains(err.Error(), "nil handle") {
		t.Errorf("nil job Step: %v", err)
	}
	if _, err := j.Run(1); status(err) != ErrNullPointer {
		t.Errorf("nil job Run: %v", err)
	}
	j.Close()
}

// A trainer added to a save (zero-copy) and closed before Save: Save
// refuses (before, the snapshot read the freed optimizer state).
func TestCkptAddThenClose(t *testing.T) {
	m, err := NewModel(ModelConfig{VocabSize: 64, MaxSeqLen: 8, Layers: 1, Width: 16, Heads: 2})
	if err != nil {
		t.Fatal(err)
	}
	tr, err := NewTrainer(m, TrainerOpts{MicroBatch: 1, SeqLen: 8, Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	x := make([]int32, 8)
	if _, err := tr.Step(x, x, 8); err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	ck, err := NewCheckpoint(root, CkptOpts{})
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	if err := ck.Begin(1); err != nil {
		t.Fatal(err)
	}
	if err := tr.CkptAdd(ck); err != nil {
		t.Fatal(err)
	}
	m.Close() // closes the trainer too
	err = ck.Save(false)
	if status(err) != ErrState || !strings.Contains(err.Error(), "closed before Save") {
		t.Errorf("save after the trainer's Close: %v", err)
	}
	if _, err := ck.OpenLatest(); status(err) != ErrNotFound {
		t.Errorf("a checkpoint was written: %v", err)
	}
	// a new description saves
	if err := ck.Begin(2); err != nil {
		t.Fatal(err)
	}
	if err := ck.AddF32("w", []float32{1, 2}, []int64{2}, nil, nil); err != nil {
		t.Fatal(err)
	}
	if err := ck.Save(false); err != nil {
		t.Errorf("save after Begin: %v", err)
	}
}

// The finalizer is the safety net of a handle never closed: a model with a
// trainer, a dataset with a loader, dropped without Close, are freed by the
// garbage collector (before, parent and child pointed at each other, a
// cycle with finalizers that Go never collects: they leaked).
func TestFinalizersFreeUnclosed(t *testing.T) {
	var mu sync.Mutex
	freed := map[string]int{}
	closeHook = func(kind string) {
		mu.Lock()
		freed[kind]++
		mu.Unlock()
	}
	defer func() { closeHook = func(string) {} }()

	want := []string{"model", "trainer"}
	data := ""
	if src := os.Getenv("LLMT_SOURCE_ROOT"); src != "" { // a corpus for the loader half
		tok, err := NewByteTokenizer()
		if err != nil {
			t.Fatal(err)
		}
		defer tok.Close()
		data = filepath.Join(t.TempDir(), "data")
		corpus := filepath.Join(src, "test", "data", "corpus")
		if _, err := PrepareData([]string{corpus}, tok, data, 0); err != nil {
			t.Fatal(err)
		}
		want = append(want, "dataset", "loader")
	}
	func() {
		m, err := NewModel(ModelConfig{VocabSize: 64, MaxSeqLen: 8, Layers: 1, Width: 16, Heads: 2})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := NewTrainer(m, TrainerOpts{MicroBatch: 1, SeqLen: 8, Threads: 1}); err != nil {
			t.Fatal(err)
		}
		if data == "" {
			return
		}
		ds, err := OpenDataset(filepath.Join(data, "train"), false)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := NewLoader(ds, LoaderOpts{SeqLen: 8, MicroBatch: 1}); err != nil {
			t.Fatal(err)
		}
	}()
	done := func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, k := range want {
			if freed[k] != 1 {
				return false
			}
		}
		return true
	}
	for i := 0; i < 100 && !done(); i++ { // a finalizer per GC cycle along a chain
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, k := range want {
		if freed[k] != 1 {
			t.Errorf("%s freed %d times by finalizers, want 1 (%v)", k, freed[k], freed)
		}
	}
}
