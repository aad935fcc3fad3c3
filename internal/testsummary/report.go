package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
)

// event is one line of go test -json (cmd/test2json's TestEvent, plus the
// build events of go test itself).
type event struct {
	Action  string
	Package string
	Test    string
	Output  string
}

// line is one line of a test's output, kept until the test ends.
type line struct {
	test, text string
}

// skip is a skipped test and why.
type skip struct {
	pkg, test, reason string
}

// report turns go test -json back into go test's own output without -v, and
// collects the skipped tests.
type report struct {
	w io.Writer
	// held is the output of each running top-level test (subtests
	// included), by package and test: printed if the test fails, dropped if
	// it passes.
	held  map[string][]line
	skips []skip

	passed, failed, skipped int
}

func newReport(w io.Writer) *report {
	return &report{w: w, held: map[string][]line{}}
}

// read consumes go test -json's output. A line that is not JSON (go test's
// own complaints) is printed as it is.
func (r *report) read(in io.Reader) error {
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		b := sc.Bytes()
		var e event
		if len(b) == 0 || b[0] != '{' || json.Unmarshal(b, &e) != nil {
			fmt.Fprintf(r.w, "%s\n", b)
			continue
		}
		r.event(e)
	}
	return sc.Err()
}

func (r *report) event(e event) {
	if e.Action == "build-output" {
		io.WriteString(r.w, e.Output)
		return
	}
	if e.Test == "" {
		switch e.Action {
		case "output":
			// go test without -v prints no PASS line, only "ok".
			if e.Output != "PASS\n" {
				io.WriteString(r.w, e.Output)
			}
		case "fail":
			// A package that failed outside a test's verdict (timeout, panic,
			// os.Exit in TestMain): show what its unfinished tests printed.
			for key, lines := range r.held {
				if strings.HasPrefix(key, e.Package+" ") {
					r.print(lines)
					delete(r.held, key)
				}
			}
		}
		return
	}
	top, _, _ := strings.Cut(e.Test, "/")
	key := e.Package + " " + top
	switch e.Action {
	case "output":
		r.held[key] = append(r.held[key], line{e.Test, e.Output})
		return
	case "pass":
		r.passed++
	case "skip":
		r.skipped++
		r.skips = append(r.skips, skip{e.Package, e.Test, reason(r.held[key], e.Test)})
	case "fail":
		r.failed++
		if e.Test == top {
			r.print(r.held[key])
		}
	default:
		return
	}
	if e.Test == top {
		delete(r.held, key)
	}
}

// print writes a test's output as go test does without -v: the log lines
// and the --- FAIL lines, not the === RUN/PAUSE/CONT/NAME progress lines.
func (r *report) print(lines []line) {
	for _, l := range lines {
		if strings.HasPrefix(l.text, "=== ") {
			continue
		}
		io.WriteString(r.w, l.text)
	}
}

// reason is what test logged before it was skipped (t.Skip's message).
func reason(lines []line, test string) string {
	var parts []string
	for _, l := range lines {
		t := strings.TrimSpace(l.text)
		if l.test != test || t == "" || strings.HasPrefix(t, "=== ") || strings.HasPrefix(t, "--- SKIP") {
			continue
		}
		parts = append(parts, t)
	}
	if len(parts) == 0 {
		return "(no reason given)"
	}
	return strings.Join(parts, " ")
}

// summary writes the counts and every skipped test with its reason.
func (r *report) summary() {
	fmt.Fprintf(r.w, "\ntests: %d passed, %d failed, %d skipped (subtests included)\n", r.passed, r.failed, r.skipped)
	if len(r.skips) == 0 {
		return
	}
	sort.Slice(r.skips, func(i, j int) bool {
		a, b := r.skips[i], r.skips[j]
		if a.pkg != b.pkg {
			return a.pkg < b.pkg
		}
		return a.test < b.test
	})
	fmt.Fprintf(r.w, "skipped:\n")
	for _, s := range r.skips {
		fmt.Fprintf(r.w, "  %s %s: %s\n", s.pkg, s.test, s.reason)
	}
}
