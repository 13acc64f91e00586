package doctor

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// Column widths for the human table. Evidence is long (paths and
// values), so it wraps inside its column instead of widening the table.
const (
	evidenceWidth = 72
	fixWidth      = 48
)

// Report is the --json document: the results and their tally.
type Report struct {
	Results  []Result       `json:"results"`
	Summary  map[string]int `json:"summary"`
	ExitCode int            `json:"exit_code"`
}

// Render writes results as a table (status, check, evidence, fix) for
// people, or with jsonOut as one JSON Report for machines.
func Render(w io.Writer, results []Result, jsonOut bool) error {
	if jsonOut {
		return renderJSON(w, results)
	}
	var buf strings.Builder
	tw := tabwriter.NewWriter(&buf, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "STATUS\tCHECK\tEVIDENCE\tFIX")
	for _, r := range results {
		ev := wrap(r.Evidence, evidenceWidth)
		fix := wrap(r.Fix, fixWidth)
		if len(fix) == 0 {
			fix = []string{"-"}
		}
		for i := range max(len(ev), len(fix), 1) {
			status, check := "", ""
			if i == 0 {
				status, check = strings.ToUpper(r.Status.String()), r.Check
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", status, check, at(ev, i), at(fix, i))
		}
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("render table: %w", err)
	}
	// Continuation rows without a fix leave the evidence padding behind.
	var table strings.Builder
	for line := range strings.Lines(buf.String()) {
		table.WriteString(strings.TrimRight(line, " \n") + "\n")
	}
	s := summarize(results)
	_, err := fmt.Fprintf(w, "%s\n%d pass, %d warn, %d fail, %d skip\n", table.String(), s["pass"], s["warn"], s["fail"], s["skip"])
	if err != nil {
		return fmt.Errorf("render summary: %w", err)
	}
	return nil
}

func renderJSON(w io.Writer, results []Result) error {
	if results == nil {
		results = []Result{}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(Report{Results: results, Summary: summarize(results), ExitCode: ExitCode(results)}); err != nil {
		return fmt.Errorf("render json: %w", err)
	}
	return nil
}

func summarize(results []Result) map[string]int {
	s := map[string]int{"pass": 0, "warn": 0, "fail": 0, "skip": 0}
	for _, r := range results {
		s[r.Status.String()]++
	}
	return s
}

func at(lines []string, i int) string {
	if i < len(lines) {
		return lines[i]
	}
	return ""
}

// wrap breaks s into lines of at most width runes at spaces; a word
// longer than width (a long path) is cut, so one long path cannot widen
// the whole table. Tabs would break the table, so they become spaces.
func wrap(s string, width int) []string {
	var words []string
	for _, w := range strings.Fields(strings.ReplaceAll(s, "\t", " ")) {
		r := []rune(w)
		for len(r) > width {
			words = append(words, string(r[:width]))
			r = r[width:]
		}
		words = append(words, string(r))
	}
	var lines []string
	var cur strings.Builder
	for _, w := range words {
		if cur.Len() > 0 && len([]rune(cur.String()))+1+len([]rune(w)) > width {
			lines = append(lines, cur.String())
			cur.Reset()
		}
		if cur.Len() > 0 {
			cur.WriteByte(' ')
		}
		cur.WriteString(w)
	}
	if cur.Len() > 0 {
		lines = append(lines, cur.String())
	}
	return lines
}
