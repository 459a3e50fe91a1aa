// jobmetrics drives a whole training job from Go and prints its metrics
// stream, one JSON line per step, to stdout.
//
// usage: jobmetrics CORPUS_DIR RUN_DIR [STEPS]
//
// CORPUS_DIR holds text files (e.g. the repository's doc/); the job
// prepares them with the byte tokenizer into RUN_DIR/data, trains a tiny
// GPT-2 for STEPS steps (default 10) with a checkpoint every 5, and writes
// RUN_DIR/metrics.jsonl as `llmtrain train` would.
package main

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"strconv"

	"llmtrain"
)

func main() {
	if len(os.Args) < 3 {
		fmt.Fprintln(os.Stderr, "usage: jobmetrics CORPUS_DIR RUN_DIR [STEPS]")
		os.Exit(2)
	}
	steps := 10
	if len(os.Args) > 3 {
		steps, _ = strconv.Atoi(os.Args[3])
	}
	spec, _ := json.Marshal(map[string]any{
		"name":       "go-example",
		"model":      map[string]any{"arch": "gpt2", "layers": 1, "hidden": 32, "heads": 2, "vocab": 320, "seq_len": 16},
		"batch":      map[string]any{"micro": 2, "grad_accum": 1},
		"optimizer":  map[string]any{"lr": 1e-2},
		"train":      map[string]any{"steps": steps, "seed": 3, "eval_interval": 5, "log_interval": 0, "threads": 1, "sample_tokens": 0},
		"data":       map[string]any{"train": os.Args[1], "tokenizer": map[string]any{"kind": "byte"}},
		"checkpoint": map[string]any{"interval": 5},
		"hardware":   map[string]any{"gpu": "cpu"},
	})
	job, err := llmtrain.NewJob(string(spec), llmtrain.JobOpts{RunDir: os.Args[2]})
	if err != nil {
		fmt.Fprintln(os.Stderr, "jobmetrics:", err) // the library's message, naming a bad key
		os.Exit(1)
	}
	defer job.Close()
	enc := json.NewEncoder(os.Stdout)
	for {
		m, err := job.Step()
		if s, ok := err.(*llmtrain.LibError); ok && s.Status == llmtrain.ErrState {
			break // stop_at reached
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "jobmetrics:", err)
			os.Exit(1)
		}
		line := map[string]any{"step": m.Step, "loss": m.Loss, "grad_norm": m.GradNorm, "lr": m.LR,
			"step_s": m.StepS, "tokens_per_s": m.TokensPerS, "mfu": m.MFU}
		if m.Events&llmtrain.JobEventValidated != 0 && !math.IsNaN(float64(m.ValLoss)) {
			line["val_loss"] = m.ValLoss
		}
		if m.Events&llmtrain.JobEventSaved != 0 {
			line["saved_step"] = m.SavedStep
		}
		enc.Encode(line)
	}
}
