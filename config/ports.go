package config

// Several ports of one app in one kbridge (mode ring): `port` with
// `interface`, the `ports:` list, and `discover`.

import (
	"fmt"
	"slices"

	"github.com/go-viper/mapstructure/v2"

	"github.com/kbridge/kbridge/internal/conferr"
	"github.com/kbridge/kbridge/internal/limits"
	"github.com/kbridge/kbridge/tap/tapconfig"
)

// PortConfig is one more port of the app (the `ports:` list) and what its
// interface has of its own.
type PortConfig struct {
	// Port is the name the app gave kbridge_port_create().
	Port string `mapstructure:"port" json:"port"`
	// Interface holds interface.* keys for this port's interface, taken
	// over the top-level interface section: the name defaults to the
	// port's, and addresses and routes are the item's own (none by
	// default), never the top-level's, which would put one address on
	// several interfaces.
	Interface map[string]any `mapstructure:"interface" json:"interface,omitempty"`
}

// PortSpec is one port a kbridge serves and the interface it makes for it.
type PortSpec struct {
	Port      string
	Interface tapconfig.Config
}

// ServesMany reports whether this configuration serves a set of ports
// (mode ring with `ports:` or `discover`), rather than the one `port`.
func (c Config) ServesMany() bool { return len(c.Ports) > 0 || c.Discover }

// PortSpecs lists the ports the file names, in order: `port` with
// `interface` (unless port is empty, which discover allows), then each of
// `ports:`. The error names each bad key and value.
func (c Config) PortSpecs() ([]PortSpec, error) {
	var errs conferr.Collector
	specs := c.portSpecs(&errs)
	return specs, errs.Err()
}

func (c Config) portSpecs(errs *conferr.Collector) []PortSpec {
	var specs []PortSpec
	if c.Port != "" {
		specs = append(specs, PortSpec{Port: c.Port, Interface: c.Interface})
	}
	for i, p := range c.Ports {
		key := conferr.Index("ports", i)
		if err := checkPortName(p.Port); err != nil {
			errs.Add(conferr.Key(key, "port"), p.Port, err.Error())
			continue
		}
		ifc, err := c.itemInterface(p)
		if err != nil {
			errs.Include(conferr.Prefix(conferr.Key(key, "interface"), err))
			continue
		}
		if err := ifc.Validate(conferr.Key(key, "interface")); err != nil {
			errs.Include(err)
			continue
		}
		if j := slices.IndexFunc(specs, func(s PortSpec) bool { return s.Port == p.Port }); j >= 0 {
			errs.Addf(conferr.Key(key, "port"), p.Port, "named twice: %s serves it already", specKey(c, j))
			continue
		}
		if j := slices.IndexFunc(specs, func(s PortSpec) bool { return s.Interface.Name == ifc.Name }); j >= 0 {
			errs.Addf(conferr.Key(key, "interface", "name"), ifc.Name, "is %s's interface too: give each port its own", specKey(c, j))
			continue
		}
		specs = append(specs, PortSpec{Port: p.Port, Interface: ifc})
	}
	return specs
}

// specKey names the key of specs[j] as PortSpecs made them.
func specKey(c Config, j int) string {
	if c.Port != "" {
		if j == 0 {
			return "port"
		}
		j--
	}
	return conferr.Index("ports", j)
}

// DiscoveredSpec is the port `discover` found: its interface is the
// top-level interface section named after the port, without its addresses
// and routes (they are `port`'s), and without its MAC, so that the app
// port's own MAC applies.
func (c Config) DiscoveredSpec(name string) PortSpec {
	ifc := c.Interface
	ifc.Name, ifc.MAC, ifc.Addresses, ifc.Routes = name, "", nil, nil
	return PortSpec{Port: name, Interface: ifc}
}

// ForPort is this configuration for one port of the set: `port` and
// `interface` are the spec's, and it serves that port alone.
func (c Config) ForPort(s PortSpec) Config {
	c.Port, c.Interface, c.Ports, c.Discover = s.Port, s.Interface, nil, false
	return c
}

// itemInterface decodes an item's interface keys over the top-level
// interface section, as the file's own keys are decoded: strictly.
func (c Config) itemInterface(p PortConfig) (tapconfig.Config, error) {
	ifc := c.Interface
	ifc.Name, ifc.MAC, ifc.Addresses, ifc.Routes = p.Port, "", nil, nil
	dec, err := mapstructure.NewDecoder(&mapstructure.DecoderConfig{
		ErrorUnused:      true,
		WeaklyTypedInput: false,
		DecodeHook:       mapstructure.ComposeDecodeHookFunc(durationHook, wholeHook, shapeHook),
		Result:           &ifc,
	})
	if err != nil {
		return tapconfig.Config{}, err
	}
	if err := dec.Decode(p.Interface); err != nil {
		var errs conferr.Collector
		for _, fe := range decodeErrors(err) {
			errs.Include(fe)
		}
		return tapconfig.Config{}, errs.Err()
	}
	return ifc, nil
}

// checkPortName says what is wrong with a port's name: it names an
// interface by default, so it must be one the kernel takes.
func checkPortName(name string) error {
	if len(name) > limits.PortNameMax {
		return fmt.Errorf("must be 1 to %d characters, the name given to kbridge_port_create()", limits.PortNameMax)
	}
	return limits.CheckIfName(name)
}
