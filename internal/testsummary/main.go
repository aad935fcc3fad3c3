// Command testsummary runs go test with -json and prints what go test prints
// without -v (each failing test's output, and a closing "ok" or "FAIL" line
// per package), then one summary of the tests that were skipped and why:
// without -v, go test hides skips, so a test that silently stopped running
// (no root, no device, a missing tool) goes unnoticed.
//
//	go run ./internal/testsummary [go test flags] [packages]
//
// Its exit status is go test's.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
)

func main() {
	args := append([]string{"test", "-json"}, os.Args[1:]...)
	cmd := exec.Command(goCommand(), args...)
	cmd.Stdin = os.Stdin
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		fmt.Fprintln(os.Stderr, "testsummary:", err)
		os.Exit(2)
	}
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "testsummary:", err)
		os.Exit(2)
	}
	r := newReport(os.Stdout)
	if err := r.read(out); err != nil {
		fmt.Fprintln(os.Stderr, "testsummary: reading go test's output:", err)
	}
	_, _ = io.Copy(io.Discard, out)
	werr := cmd.Wait()
	r.summary()
	var exit *exec.ExitError
	switch {
	case errors.As(werr, &exit):
		os.Exit(exit.ExitCode())
	case werr != nil:
		fmt.Fprintln(os.Stderr, "testsummary:", werr)
		os.Exit(2)
	case r.failed > 0:
		os.Exit(1)
	}
}

// goCommand is the go command to run: $GO, else go.
func goCommand() string {
	if g := os.Getenv("GO"); g != "" {
		return g
	}
	return "go"
}
