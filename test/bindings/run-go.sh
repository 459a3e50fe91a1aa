#!/bin/sh
# Go: go test of bindings-template/go (cgo) against the built library: smoke,
# the layout (cgo vs generated table vs layout_ref) and a real job.
# usage: run-go.sh SOURCE_ROOT LIBDIR WORKDIR [LAYOUT_REF_EXE LLMTRAIN_EXE]
src="$1"; libdir="$2"; work="$3"
command -v go >/dev/null 2>&1 || { echo "go not found: SKIP"; exit 77; }
mkdir -p "$work/go-cache" "$work/go-path" || exit 1
export GOCACHE="$work/go-cache" GOPATH="$work/go-path" GOFLAGS=-mod=mod \
       GOPROXY=off GOTOOLCHAIN=local CGO_ENABLED=1
export CGO_CFLAGS="-I$src/include" CGO_LDFLAGS="-L$libdir -Wl,-rpath,$libdir"
if [ -n "$4" ]; then
  "$4" > "$work/layout_ref.txt" || exit 1
  export LLMT_LAYOUT_REF="$work/layout_ref.txt" LLMT_LLMTRAIN="$5" LLMT_SOURCE_ROOT="$src"
fi
cd "$src/bindings-template/go" || exit 1
go test -count=1 -v ./... || exit 1
# the example: a job whose metrics stream is printed, one JSON line a step
go build -o "$work/go-jobmetrics" ./examples/jobmetrics || exit 1
rm -rf "$work/go-example"
"$work/go-jobmetrics" "$src/test/data/corpus" "$work/go-example" 10 > "$work/go-example.out" || exit 1
n=$(grep -c '"loss"' "$work/go-example.out")
[ "$n" = 10 ] || { echo "example: $n metric lines, expected 10"; exit 1; }
grep -q '"saved_step":10' "$work/go-example.out" || { echo "example: no save at 10"; exit 1; }
echo "example jobmetrics: 10 steps printed, saved at 5 and 10"
