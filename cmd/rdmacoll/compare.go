package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
)

// resultKey names one line of a result file.
type resultKey struct {
	op   string
	size int
}

// readResults reads the result lines (op, size, time in us, ...) of every
// file in the comma-separated list, and returns each key's times, one per
// file, with the keys in the order of their first appearance.
func readResults(list string) (map[resultKey][]float64, []resultKey, error) {
	times := map[resultKey][]float64{}
	var order []resultKey
	for _, path := range strings.Split(list, ",") {
		f, err := os.Open(path)
		if err != nil {
			return nil, nil, err
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) < 3 || strings.HasPrefix(fields[0], "#") {
				continue
			}
			size, err1 := strconv.Atoi(fields[1])
			us, err2 := strconv.ParseFloat(fields[2], 64)
			if err1 != nil || err2 != nil {
				continue // a launcher's or a rank's own line
			}
			k := resultKey{fields[0], size}
			if _, ok := times[k]; !ok {
				order = append(order, k)
			}
			times[k] = append(times[k], us)
		}
		f.Close()
		if err := sc.Err(); err != nil {
			return nil, nil, fmt.Errorf("%s: %w", path, err)
		}
	}
	return times, order, nil
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// compareFiles prints, for every operation and size in both lists, the
// median over the files of each side and their ratio (this / base).
func compareFiles(baseList, thisList string, w io.Writer) error {
	base, _, err := readResults(baseList)
	if err != nil {
		return err
	}
	this, order, err := readResults(thisList)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "# time ratio: %s / %s (medians over the runs; below 1 is faster than the base)\n", thisList, baseList)
	fmt.Fprintf(w, "%-12s %10s %12s %12s %8s %s\n", "# op", "size", "base(us)", "this(us)", "ratio", "runs")
	matched := 0
	for _, k := range order {
		b, ok := base[k]
		if !ok {
			continue
		}
		t := this[k]
		mb, mt := median(b), median(t)
		fmt.Fprintf(w, "%-12s %10d %12.2f %12.2f %8.2f %d/%d\n", k.op, k.size, mb, mt, mt/mb, len(b), len(t))
		matched++
	}
	if matched == 0 {
		return fmt.Errorf("no operation and size in both %s and %s", baseList, thisList)
	}
	return nil
}
