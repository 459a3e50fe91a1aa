package llmtrain

import (
	"errors"
	"strings"
	"testing"
)

func TestVersionAndABI(t *testing.T) {
	if v := Version(); len(strings.Split(v, ".")) != 3 {
		t.Fatalf("version %q", v)
	}
	if major, _ := ABIVersion(); major != ABIMajor {
		t.Fatalf("ABI major %d, bindings written for %d", major, ABIMajor)
	}
}

func TestFeatures(t *testing.T) {
	known := map[string]bool{"cuda": true, "nccl": true, "mpi": true, "aio": true, "openblas": true, "openmp": true, "gloo": true}
	for _, f := range Features() {
		if !known[f] {
			t.Errorf("unknown feature %q", f)
		}
	}
}

func TestStatusStrings(t *testing.T) {
	if s := StatusString(0); s != "ok" {
		t.Errorf("status 0: %q", s)
	}
	if s := StatusString(13); s != "timed out" {
		t.Errorf("status 13: %q", s)
	}
	if s := StatusString(55555); s != "unknown status" {
		t.Errorf("unknown: %q", s)
	}
}

func TestTensor(t *testing.T) {
	buf := make([]float32, 6)
	v, err := TensorF32(buf, []int64{2, 3})
	if err != nil {
		t.Fatal(err)
	}
	if s := TensorStrides(v, 2); s[0] != 3 || s[1] != 1 {
		t.Errorf("strides %v", s)
	}
	_, err = TensorF32(buf, []int64{2, -3})
	var le *Error
	if !errors.As(err, &le) || le.Status != 1 {
		t.Errorf("negative shape: %v", err)
	}
}
