package xdp

// The steering object is compiled with clang and embedded by bpf2go. The
// generated steer_bpfel.go and steer_bpfel.o are committed, so building
// kbridge needs no clang; run `go generate ./xdp/` after editing steer.c.
// Only little-endian (bpfel) output is generated: kbridge targets amd64 and
// arm64.
//
//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -cc clang -cflags "-O2 -g -Wall -Werror -mcpu=v3" -target bpfel -type kb_config -type kb_rule -type kb_counter -type kb_stat -type kb_match -type kb_fallback steer steer.c
