package config

// Decoding: the YAML file through viper and mapstructure into a Config,
// strictly, with every error naming its key.

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"os"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/go-viper/mapstructure/v2"
	"github.com/spf13/viper"
	"go.yaml.in/yaml/v3"

	"github.com/kbridge/kbridge/internal/conferr"
)

// Load reads the YAML file at path over the defaults and validates it. A
// file with several mistakes gets one error naming them all: unknown keys,
// values of the wrong type and values out of range, each a
// *conferr.FieldError (errors.Is(err, conferr.ErrInvalid) holds).
func Load(path string) (Config, error) { return loadOver(path, Default()) }

// loadOver reads the file at path over the defaults d.
func loadOver(path string, d Config) (Config, error) {
	v := viper.New()
	v.SetConfigType("yaml")
	setDefaults(v, d)
	raw, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("config: %w", err)
	}
	if err := v.ReadConfig(bytes.NewReader(raw)); err != nil {
		return Config{}, fmt.Errorf("config %s: not valid YAML: %w", path, err)
	}
	c, err := decode(v, d, caseErrors(raw)...)
	if err != nil {
		return Config{}, fmt.Errorf("config %s: %w", path, err)
	}
	return c, nil
}

// caseErrors names the keys of the YAML file raw that are not written in
// lower case. viper folds every key to lower case and mapstructure matches
// names regardless of case, so "Policy: {Mode: busy}" would be taken as
// policy.mode; the keys are documented in lower case and are refused in any
// other. The outermost such key is named, with the key meant.
func caseErrors(raw []byte) []*conferr.FieldError {
	var doc any
	if yaml.Unmarshal(raw, &doc) != nil {
		return nil // viper says what is wrong with it
	}
	var out []*conferr.FieldError
	var walk func(key string, v any)
	walk = func(key string, v any) {
		switch t := v.(type) {
		case map[string]any:
			for _, k := range slices.Sorted(maps.Keys(t)) {
				full := conferr.Key(key, k)
				if lower := strings.ToLower(k); lower != k {
					out = append(out, conferr.New(full, nil, reasonUnknown+
						": keys are lower case, did you mean "+conferr.Key(key, lower)+"?"))
					continue
				}
				walk(full, t[k])
			}
		case []any:
			for i, e := range t {
				walk(conferr.Index(key, i), e)
			}
		}
	}
	walk("", doc)
	return out
}

// decode turns what viper read into a Config and checks it, collecting the
// errors of every stage. A value that does not decode keeps its default, so
// that validation can go on with the other keys; validation errors about a
// key that did not decode are dropped, since they would be about the
// default, not the file.
func decode(v *viper.Viper, d Config, miscased ...*conferr.FieldError) (Config, error) {
	var errs conferr.Collector
	for _, fe := range miscased {
		errs.Include(fe)
	}
	unknown := unknownKeys(v)
	for _, fe := range unknown {
		errs.Include(fe)
	}
	c := d
	err := v.Unmarshal(&c, func(dc *mapstructure.DecoderConfig) {
		dc.ErrorUnused = true
		dc.WeaklyTypedInput = false
		// Replaces viper's hooks, which turn a bare number into
		// nanoseconds and a string into a one-element list: a list must
		// be a list, as strict decoding wants everywhere else.
		dc.DecodeHook = mapstructure.ComposeDecodeHookFunc(durationHook, wholeHook, shapeHook)
	})
	var failed []string
	for _, fe := range decodeErrors(err) {
		if fe.Reason == reasonUnknown && reportedUnder(unknown, fe.Key) {
			continue
		}
		failed = append(failed, fe.Key)
		errs.Include(fe)
	}
	verr := c.Validate()
	list, ok := verr.(conferr.List)
	if !ok && verr != nil {
		list = conferr.List{verr}
	}
	for _, e := range list {
		var fe *conferr.FieldError
		if errors.As(e, &fe) && slices.ContainsFunc(failed, func(k string) bool { return under(fe.Key, k) }) {
			continue
		}
		errs.Include(e)
	}
	if err := errs.Err(); err != nil {
		return Config{}, err
	}
	return c, nil
}

// durationHook decodes time.Duration keys from strings only ("20us",
// "1.5ms"). A bare number is refused: YAML "spin: 20" would otherwise be 20
// nanoseconds, a thousand times less than whoever wrote it likely meant.
// A bare 0 is accepted because it is 0 in every unit, so it cannot be
// misread (time.ParseDuration accepts "0" for the same reason), and it is
// the natural way to write "off" for backoff.max and dpdk.wait.
func durationHook(from, to reflect.Type, data any) (any, error) {
	if to != durationType || from == durationType {
		return data, nil
	}
	switch rv := reflect.ValueOf(data); {
	case rv.CanInt(), rv.CanUint(), rv.CanFloat():
		if rv.IsZero() {
			return time.Duration(0), nil
		}
		return nil, conferr.Errorf("", data, "a duration needs a unit, e.g. %vus", data)
	case rv.Kind() == reflect.String:
		d, err := conferr.ParseDuration(rv.String(), "us")
		if err != nil {
			return nil, conferr.New("", data, err.Error())
		}
		return d, nil
	}
	return nil, conferr.Errorf("", data, "must be a duration, not %s: %s", describeValue(data), conferr.DurationUnits)
}

var durationType = reflect.TypeFor[time.Duration]()

// wholeHook refuses a number with a fraction or an exponent (YAML's
// floats: 3.5, 1e2, 100.0) where a whole number belongs: mapstructure
// would truncate 3.5 to 3 and take 1e2 as 100, without a word.
func wholeHook(from, to reflect.Type, data any) (any, error) {
	if to == durationType || !isWhole(to.Kind()) || (from.Kind() != reflect.Float32 && from.Kind() != reflect.Float64) {
		return data, nil
	}
	return nil, conferr.New("", data, "must be a whole number, not a number with a fraction or an exponent")
}

func isWhole(k reflect.Kind) bool {
	return k >= reflect.Int && k <= reflect.Uintptr
}

// shapeHook refuses a value where a list or a mapping belongs, naming the
// value: a single address where a list of addresses is wanted, say.
// mapstructure's own words ("source data must be an array or slice, got
// string") name neither.
func shapeHook(from, to reflect.Type, data any) (any, error) {
	switch {
	case data == nil:
	case (to.Kind() == reflect.Slice || to.Kind() == reflect.Array) && from.Kind() != reflect.Slice && from.Kind() != reflect.Array:
		if from.Kind() == reflect.Map {
			return nil, conferr.New("", nil, "must be a list, not the mapping "+flow(data)+": write each item after a '-', or [a, b]")
		}
		return nil, conferr.Errorf("", data, "must be a list, not %s: write [%v] for one item", describeValue(data), data)
	case to.Kind() == reflect.Struct && to != durationType && from.Kind() != reflect.Map && from.Kind() != reflect.Struct:
		return nil, conferr.Errorf("", data, "must be a mapping of keys to values, not %s", describeValue(data))
	}
	return data, nil
}

const reasonUnknown = "unknown key"

// decodeErrors turns what mapstructure reports into FieldErrors that name
// the key, the value found in the file and what is wrong. mapstructure
// nests its errors (a DecodeError per field, joined per struct); only the
// leaves are of interest.
func decodeErrors(err error) []*conferr.FieldError {
	var out []*conferr.FieldError
	var walk func(key string, err error)
	walk = func(key string, err error) {
		switch e := err.(type) {
		case nil:
		case interface{ Unwrap() []error }:
			for _, err := range e.Unwrap() {
				walk(key, err)
			}
		case *mapstructure.DecodeError:
			// Names are full keys: "interface.routes[0].to". Unused keys
			// have no error type of their own, only this message.
			inner := e.Unwrap()
			if keys, ok := strings.CutPrefix(inner.Error(), "has invalid keys: "); ok {
				for k := range strings.SplitSeq(keys, ", ") {
					out = append(out, conferr.New(conferr.Key(e.Name(), k), nil, reasonUnknown))
				}
				return
			}
			walk(e.Name(), inner)
		case *conferr.FieldError: // from durationHook, keyless
			out = append(out, conferr.Prefix(key, e).(*conferr.FieldError))
		case *mapstructure.UnconvertibleTypeError:
			out = append(out, conferr.Errorf(key, e.Value, "must be %s, not %s",
				describeType(e.Expected.Type()), describeValue(e.Value)))
		default:
			if u := errors.Unwrap(err); u != nil && key == "" {
				walk(key, u) // mapstructure's "decoding failed due to ..."
				return
			}
			out = append(out, conferr.New(key, nil, err.Error()))
		}
	}
	walk("", err)
	slices.SortStableFunc(out, func(a, b *conferr.FieldError) int { return strings.Compare(a.Key, b.Key) })
	return out
}

// flow writes a YAML value on one line, as the file could have: {to: x}.
func flow(v any) string {
	switch rv := reflect.ValueOf(v); rv.Kind() {
	case reflect.Map:
		var parts []string
		for it := rv.MapRange(); it.Next(); {
			parts = append(parts, fmt.Sprint(it.Key().Interface())+": "+flow(it.Value().Interface()))
		}
		slices.Sort(parts)
		return "{" + strings.Join(parts, ", ") + "}"
	case reflect.Slice:
		parts := make([]string, rv.Len())
		for i := range parts {
			parts[i] = flow(rv.Index(i).Interface())
		}
		return "[" + strings.Join(parts, ", ") + "]"
	}
	return fmt.Sprint(v)
}

// describeType says what a YAML value for a field of type t looks like.
func describeType(t reflect.Type) string {
	switch {
	case t == durationType:
		return "a duration with a unit, e.g. 20us"
	case t.Kind() == reflect.Bool:
		return "true or false"
	case t.Kind() == reflect.String:
		return "a string"
	case t.Kind() >= reflect.Int && t.Kind() <= reflect.Uintptr:
		return "a whole number"
	case t.Kind() == reflect.Float32 || t.Kind() == reflect.Float64:
		return "a number"
	case t.Kind() == reflect.Slice || t.Kind() == reflect.Array:
		return "a list"
	}
	return "a mapping of keys to values"
}

// describeValue says what kind of YAML value v is.
func describeValue(v any) string {
	switch rv := reflect.ValueOf(v); {
	case v == nil:
		return "empty"
	case rv.Kind() == reflect.Bool:
		return "true or false"
	case rv.Kind() == reflect.String:
		return "a string"
	case rv.CanInt() || rv.CanUint() || rv.CanFloat():
		return "a number"
	case rv.Kind() == reflect.Slice:
		return "a list"
	case rv.Kind() == reflect.Map:
		return "a mapping"
	}
	return fmt.Sprintf("a %T", v)
}

// under reports whether key is parent or a key inside it.
func under(key, parent string) bool {
	rest, ok := strings.CutPrefix(key, parent)
	return ok && (rest == "" || rest[0] == '.' || rest[0] == '[')
}

// reportedUnder reports whether an unknown key at or under key was
// reported already: mapstructure names the outermost unknown key
// ("foo" for foo: {bar: 1}) where viper names the leaf ("foo.bar").
func reportedUnder(unknown []*conferr.FieldError, key string) bool {
	return slices.ContainsFunc(unknown, func(fe *conferr.FieldError) bool {
		return under(fe.Key, strings.ToLower(key))
	})
}

// setDefaults registers every leaf of d as a default, so that viper knows
// each key and an empty file yields Default().
func setDefaults(v *viper.Viper, d Config) {
	var m map[string]any
	_ = mapstructure.Decode(d, &m)
	var walk func(prefix string, m map[string]any)
	walk = func(prefix string, m map[string]any) {
		for k, val := range m {
			key := k
			if prefix != "" {
				key = prefix + "." + k
			}
			if sub, ok := val.(map[string]any); ok {
				walk(key, sub)
				continue
			}
			v.SetDefault(key, val)
		}
	}
	walk("", toMap(m))
}

// toMap converts the nested structs mapstructure.Decode leaves in place.
func toMap(m map[string]any) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		switch t := v.(type) {
		case map[string]any:
			out[k] = toMap(t)
		default:
			var sub map[string]any
			if v != nil && reflect.TypeOf(v).Kind() == reflect.Struct && mapstructure.Decode(v, &sub) == nil {
				out[k] = toMap(sub)
			} else {
				out[k] = v
			}
		}
	}
	return out
}
