package xdp

import "github.com/kbridge/kbridge/xdp/xdpconfig"

// The path's configuration is plain data in package xdpconfig (so that
// package config, which embeds it, imports no BPF or netlink library);
// these are its names as xdp's callers know them.

// ConfigKey is the key of this section in kbridge's YAML; field names in
// validation errors start with it.
const ConfigKey = xdpconfig.ConfigKey

type (
	// Config describes one XDP path (xdpconfig.Config).
	Config = xdpconfig.Config
	// Rule selects fast-path frames (xdpconfig.Rule).
	Rule = xdpconfig.Rule
	// Mode selects how the programs are attached (xdpconfig.Mode).
	Mode = xdpconfig.Mode
	// Loader says who attaches kbridge_steer to the NIC (xdpconfig.Loader).
	Loader = xdpconfig.Loader
	// Fallback is what kbridge_steer does with a fast-path frame no AF_XDP
	// socket takes (xdpconfig.Fallback).
	Fallback = xdpconfig.Fallback
	// NAPI selects how kb0 gets its NAPI context (xdpconfig.NAPI).
	NAPI = xdpconfig.NAPI
)

// The values of Config's enumerations (xdpconfig's).
const (
	ModeAuto          = xdpconfig.ModeAuto
	ModeNative        = xdpconfig.ModeNative
	ModeGeneric       = xdpconfig.ModeGeneric
	LoaderKbridge     = xdpconfig.LoaderKbridge
	LoaderPMD         = xdpconfig.LoaderPMD
	FallbackException = xdpconfig.FallbackException
	FallbackDrop      = xdpconfig.FallbackDrop
	FallbackPass      = xdpconfig.FallbackPass
	NAPIGRO           = xdpconfig.NAPIGRO
	NAPIXDP           = xdpconfig.NAPIXDP
)

// DefaultPinRoot is where bpffs is mounted (xdpconfig.DefaultPinRoot).
const DefaultPinRoot = xdpconfig.DefaultPinRoot

// MaxRules is the number of fast-path rules the program holds.
const MaxRules = xdpconfig.MaxRules
