package harness

import (
	"encoding/json"
	"errors"
	"fmt"
)

// Iperf3 is the part of `iperf3 -J` output the tests read.
type Iperf3 struct {
	Error string `json:"error"`
	End   struct {
		// SumReceived is the receiver's side: the client's with -R, the
		// server's without; right either way.
		SumReceived struct {
			Bytes         float64 `json:"bytes"`
			BitsPerSecond float64 `json:"bits_per_second"`
		} `json:"sum_received"`
	} `json:"end"`
}

// ErrIperf3NoData is a run that received nothing.
var ErrIperf3NoData = errors.New("iperf3 reported no received bytes")

// ParseIperf3 reads `iperf3 -J` output; a run iperf3 itself reports as
// failed is an error.
func ParseIperf3(out []byte) (Iperf3, error) {
	var r Iperf3
	if err := json.Unmarshal(out, &r); err != nil {
		return r, fmt.Errorf("iperf3 JSON: %w", err)
	}
	if r.Error != "" {
		return r, errors.New("iperf3: " + r.Error)
	}
	return r, nil
}

// Iperf3Gbps returns the receiver's rate in Gbit/s from `iperf3 -J` output.
func Iperf3Gbps(out []byte) (float64, error) {
	r, err := ParseIperf3(out)
	if err != nil {
		return 0, err
	}
	if r.End.SumReceived.BitsPerSecond <= 0 {
		return 0, ErrIperf3NoData
	}
	return r.End.SumReceived.BitsPerSecond / 1e9, nil
}
