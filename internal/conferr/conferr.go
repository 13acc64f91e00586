// Package conferr is kbridge's one way to report a bad configuration value.
// A FieldError names the key as the YAML spells it ("interface.mtu",
// "interface.routes[2].via"), the offending value and what is wrong, and
// matches ErrInvalid under errors.Is, so a caller can tell "the file is
// wrong" from "the machine is wrong" without parsing messages. A Collector
// gathers every problem of one validation into a List, so that a file with
// several mistakes is reported in one message instead of one per run; Key,
// Index and Prefix build nested keys for validators that check a section
// without knowing where it sits in the file.
//
// The package is named for the errors it makes, not the keys: the keys are
// plain strings, and every package that validates configuration (config,
// policy, tap, xdp) imports it, so it depends on nothing of kbridge's.
package conferr

import (
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
)

// ErrInvalid is matched by every FieldError (errors.Is(err, ErrInvalid)):
// the configuration, not the system, is at fault.
var ErrInvalid = errors.New("invalid configuration")

// FieldError says that the value of one configuration key is wrong.
type FieldError struct {
	// Key is the full key as the YAML spells it, e.g. "interface.mtu" or
	// "xdp.fast_path[1].ports".
	Key string
	// Value is the offending value, as decoded or as found in the file;
	// nil when the key itself is the problem (unknown or missing).
	Value any
	// Reason says what is wrong and, where it can, what would be right.
	// It avoids "; ", which separates the errors of a List.
	Reason string
}

// New returns a FieldError.
func New(key string, value any, reason string) *FieldError {
	return &FieldError{Key: key, Value: value, Reason: reason}
}

// Errorf returns a FieldError whose reason is formatted.
func Errorf(key string, value any, format string, args ...any) *FieldError {
	return &FieldError{Key: key, Value: value, Reason: fmt.Sprintf(format, args...)}
}

// Error returns "key: value: reason"; a string value is quoted, so that an
// empty or space-padded one shows, and a nil value is left out (as is an
// empty key, which a section's validator leaves for Prefix to fill in).
func (e *FieldError) Error() string {
	var b strings.Builder
	if e.Key != "" {
		b.WriteString(e.Key + ": ")
	}
	if e.Value != nil {
		b.WriteString(formatValue(e.Value) + ": ")
	}
	b.WriteString(e.Reason)
	return b.String()
}

// Is reports whether target is ErrInvalid.
func (e *FieldError) Is(target error) bool { return target == ErrInvalid }

// formatValue quotes values of any string type (policy.Mode, xdp.Loader,
// ...) and prints the rest as fmt does, durations with their String method.
func formatValue(v any) string {
	if rv := reflect.ValueOf(v); rv.Kind() == reflect.String {
		return strconv.Quote(rv.String())
	}
	return fmt.Sprint(v)
}

// Key joins the parts of a key with dots, leaving out empty parts:
// Key("interface", "mtu") is "interface.mtu", Key("", "port") is "port".
func Key(parts ...string) string {
	var b strings.Builder
	for _, p := range parts {
		if p == "" {
			continue
		}
		if b.Len() > 0 && p[0] != '[' {
			b.WriteByte('.')
		}
		b.WriteString(p)
	}
	return b.String()
}

// Index returns the key of element i of the list at key: Index("routes", 2)
// is "routes[2]".
func Index(key string, i int) string {
	return key + "[" + strconv.Itoa(i) + "]"
}

// Prefix returns err with prefix put in front of the key of every
// FieldError in it, so that a validator of one section can name keys
// relative to it. It copies the FieldErrors it changes and returns other
// errors as they are; Prefix(p, nil) is nil.
func Prefix(prefix string, err error) error {
	if err == nil || prefix == "" {
		return err
	}
	switch e := err.(type) {
	case *FieldError:
		c := *e
		c.Key = Key(prefix, e.Key)
		return &c
	case List:
		out := make(List, len(e))
		for i, err := range e {
			out[i] = Prefix(prefix, err)
		}
		return out
	}
	return err
}

// KeysOf returns the keys named by the errors of err, a List (or one error),
// in order. It fails on the first error that is not, or does not wrap, a
// *FieldError: that error is returned.
func KeysOf(err error) ([]string, error) {
	var l List
	if !errors.As(err, &l) {
		l = List{err}
	}
	keys := make([]string, 0, len(l))
	for _, e := range l {
		var fe *FieldError
		if !errors.As(e, &fe) {
			return keys, e
		}
		keys = append(keys, fe.Key)
	}
	return keys, nil
}

// List is several configuration errors reported together.
type List []error

// Error joins the messages with "; ", keeping the whole report on the one
// line a log or systemd's status shows.
func (l List) Error() string {
	msgs := make([]string, len(l))
	for i, err := range l {
		msgs[i] = err.Error()
	}
	return strings.Join(msgs, "; ")
}

// Unwrap lets errors.Is and errors.As look at each error.
func (l List) Unwrap() []error { return l }

// Collector gathers the errors of one validation. Its zero value is ready;
// keys passed to Add and Addf are put under Prefix.
type Collector struct {
	// Prefix is the key of the section being checked, e.g. "policy".
	Prefix string
	errs   List
}

// Add records that the value of key (under c.Prefix) is wrong.
func (c *Collector) Add(key string, value any, reason string) {
	c.errs = append(c.errs, New(Key(c.Prefix, key), value, reason))
}

// Addf is Add with a formatted reason.
func (c *Collector) Addf(key string, value any, format string, args ...any) {
	c.Add(key, value, fmt.Sprintf(format, args...))
}

// Include records err, which already names its keys in full (for example
// what a nested section's Validate returned). A List is flattened into its
// errors, so that one report is one flat List; a wrapped List is kept whole
// with its context. nil is ignored.
func (c *Collector) Include(err error) {
	switch e := err.(type) {
	case nil:
	case List:
		c.errs = append(c.errs, e...)
	default:
		c.errs = append(c.errs, err)
	}
}

// Len returns the number of errors recorded.
func (c *Collector) Len() int { return len(c.errs) }

// Err returns nil when nothing was recorded, and a List of everything
// recorded otherwise.
func (c *Collector) Err() error {
	if len(c.errs) == 0 {
		return nil
	}
	return c.errs
}
