package cpulist

import (
	"slices"
	"testing"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []int
		err  bool
	}{
		{"", nil, false},
		{"(null)", nil, false},
		{"0", []int{0}, false},
		{"0-3,8,10-11\n", []int{0, 1, 2, 3, 8, 10, 11}, false},
		{"0-2,4,6-7\n", []int{0, 1, 2, 4, 6, 7}, false},
		{"3,1,1-2", []int{1, 2, 3}, false},
		{"4-2", nil, true},
		{"3-1", nil, true},
		{"a", nil, true},
		{"1-", nil, true},
		{"-1", nil, true},
		{"0-7:2", nil, true},
		{"1,,2", nil, true},
	} {
		got, err := Parse(tc.in)
		if (err != nil) != tc.err || !slices.Equal(got, tc.want) {
			t.Errorf("Parse(%q) = %v, %v; want %v, err %v", tc.in, got, err, tc.want, tc.err)
		}
	}
}

func TestFormat(t *testing.T) {
	for in, want := range map[string]string{"": "", "0": "0", "0-3,8,10-11": "0-3,8,10-11", "1,2,3,5": "1-3,5", "0-2,4,6-7": "0-2,4,6-7"} {
		cpus, _ := Parse(in)
		if got := Format(cpus); got != want {
			t.Errorf("Format(%v) = %q, want %q", cpus, got, want)
		}
	}
	if got := Format([]int{5, 1, 2, 2, 3}); got != "1-3,5" {
		t.Errorf("Format of an unsorted set with a repeat = %q, want 1-3,5", got)
	}
}
