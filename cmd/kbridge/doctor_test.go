package main

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/kbridge/kbridge/copp"
	"github.com/kbridge/kbridge/doctor"
)

func TestThePolicedCountersOfAStatusAreSummedOverItsQueues(t *testing.T) {
	got, err := policedInStatus([]byte(`{"queues":[
		{"copp":{"policed":[1,2,3,4,5],"policing":["default"]}},
		{"copp":{"policed":[10,20,30,40,50]}},
		{}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if want := [copp.NumClasses]uint64{11, 22, 33, 44, 55}; got != want {
		t.Errorf("got %v, want %v", got, want)
	}
}

func TestAStatusWithoutCoPPCountersSaysCoPPIsOff(t *testing.T) {
	if _, err := policedInStatus([]byte(`{"queues":[{"cpu":1}]}`)); !errors.Is(err, doctor.ErrCoPPOff) {
		t.Errorf("got %v, want ErrCoPPOff", err)
	}
	if _, err := policedInStatus([]byte(`{"queues":`)); err == nil || errors.Is(err, doctor.ErrCoPPOff) {
		t.Errorf("a cut document gave %v", err)
	}
}

func TestASocketNobodyServesIsNoInstance(t *testing.T) {
	_, err := socketCoPP(filepath.Join(t.TempDir(), "control.sock")).Policed(context.Background())
	if !errors.Is(err, doctor.ErrNoInstance) {
		t.Errorf("got %v, want ErrNoInstance", err)
	}
}

func TestTheSocketsStateOfAStatusSumsItsQueuesUnwantedCounters(t *testing.T) {
	got, err := socketsInStatus([]byte(`{"sockets":{"tcp":"on","udp":"a raw socket of UDP"},"queues":[
		{"copp":{"unwanted":[1,2,3]}},
		{"copp":{"unwanted":[10,20,30]}},
		{}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if got.TCP != "on" || got.UDP != "a raw socket of UDP" || got.Unwanted != [copp.NumUnwantedWhys]uint64{11, 22, 33} {
		t.Errorf("got %+v", got)
	}
	if _, err := socketsInStatus([]byte(`{"queues":[{"cpu":1}]}`)); !errors.Is(err, doctor.ErrCoPPOff) {
		t.Errorf("no sockets state: got %v, want ErrCoPPOff", err)
	}
}
