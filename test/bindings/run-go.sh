#!/bin/sh
# Go smoke test: go test of bindings-template/go (cgo) against the built library.
# usage: run-go.sh SOURCE_ROOT LIBDIR WORKDIR
src="$1"; libdir="$2"; work="$3"
command -v go >/dev/null 2>&1 || { echo "go not found: SKIP"; exit 77; }
mkdir -p "$work/go-cache" "$work/go-path" || exit 1
export GOCACHE="$work/go-cache" GOPATH="$work/go-path" GOFLAGS=-mod=mod \
       GOPROXY=off GOTOOLCHAIN=local CGO_ENABLED=1
export CGO_CFLAGS="-I$src/include" CGO_LDFLAGS="-L$libdir -Wl,-rpath,$libdir"
cd "$src/bindings-template/go" || exit 1
exec go test -count=1 ./...
