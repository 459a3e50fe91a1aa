package llmtrain

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestLayoutMatchesC(t *testing.T) {
	if err := CheckLayout(); err != nil {
		t.Fatal(err)
	}
	ref := os.Getenv("LLMT_LAYOUT_REF")
	if ref == "" {
		t.Skip("LLMT_LAYOUT_REF not set")
	}
	want, err := os.ReadFile(ref)
	if err != nil {
		t.Fatal(err)
	}
	if LayoutText() != string(want) {
		t.Fatal("cgo layout differs from layout_ref")
	}
}

func losses(t *testing.T, path string) map[int]string {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[int]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.Contains(line, "\"loss\":") || strings.Contains(line, "\"event\"") {
			continue
		}
		var d map[string]json.RawMessage
		json.Unmarshal([]byte(line), &d)
		var step int
		json.Unmarshal(d["step"], &step)
		out[step] = string(d["loss"])
	}
	return out
}

func TestJobEqualsCLI(t *testing.T) {
	src, exe := os.Getenv("LLMT_SOURCE_ROOT"), os.Getenv("LLMT_LLMTRAIN")
	if src == "" || exe == "" {
		t.Skip("LLMT_SOURCE_ROOT/LLMT_LLMTRAIN not set")
	}
	tmp := t.TempDir()
	corpus := filepath.Join(tmp, "corpus")
	os.MkdirAll(corpus, 0o755)
	mds, _ := filepath.Glob(filepath.Join(src, "doc", "*.md"))
	for _, m := range mds {
		b, _ := os.ReadFile(m)
		os.WriteFile(filepath.Join(corpus, filepath.Base(m)), b, 0o644)
	}
	spec := `{"name": "bind",
 "model": {"arch": "gpt2", "layers": 1, "hidden": 32, "heads": 2, "vocab": 320, "seq_len": 16},
 "batch": {"micro": 2, "grad_accum": 1}, "optimizer": {"lr": 1e-2},
 "train": {"steps": 20, "seed": 3, "eval_interval": 0, "log_interval": 0, "threads": 1, "sample_tokens": 0},
 "data": {"train": "` + corpus + `", "tokenizer": {"kind": "byte"}},
 "checkpoint": {"interval": 10}, "hardware": {"gpu": "cpu"}}`
	sp := filepath.Join(tmp, "spec.json")
	os.WriteFile(sp, []byte(spec), 0o644)
	if out, err := exec.Command(exe, "train", sp, "--out", filepath.Join(tmp, "ref")).CombinedOutput(); err != nil {
		t.Fatalf("llmtrain train: %v\n%s", err, out)
	}
	run := filepath.Join(tmp, "go")
	j, err := NewJob(spec, JobOpts{RunDir: run, StopAt: 10})
	if err != nil {
		t.Fatal(err)
	}
	if m, err := j.Run(0); err != nil || m.Step != 10 {
		t.Fatalf("run to 10: %v %v", m, err)
	}
	j.Close()
	j.Close() // double close: a no-op
	if _, err := j.Step(); err == nil || !strings.Contains(err.Error(), "closed") {
		t.Fatalf("use after close: %v", err)
	}
	j, err = NewJob(spec, JobOpts{RunDir: run, Resume: true})
	if err != nil {
		t.Fatal(err)
	}
	if s, _ := j.StartStep(); s != 10 {
		t.Fatalf("resumed at %d", s)
	}
	if m, err := j.Run(0); err != nil || m.Step != 20 {
		t.Fatalf("run to 20: %v %v", m, err)
	}
	j.Close()
	a, b := losses(t, filepath.Join(tmp, "ref", "metrics.jsonl")), losses(t, filepath.Join(run, "metrics.jsonl"))
	if len(a) != 20 || len(b) != 20 {
		t.Fatalf("steps: %d %d", len(a), len(b))
	}
	for s, l := range a {
		if b[s] != l {
			t.Fatalf("step %d: loss %s vs CLI %s", s, b[s], l)
		}
	}
	_, err = NewJob(strings.Replace(spec, `"layers": 1`, `"layers": 1, "no_such_key": 1`, 1), JobOpts{RunDir: filepath.Join(tmp, "bad")})
	if err == nil || !strings.Contains(err.Error(), "no_such_key") {
		t.Fatalf("bad key: %v", err)
	}
	t.Logf("20 steps, save + resume, losses equal the CLI's; error: %v", err)
}
