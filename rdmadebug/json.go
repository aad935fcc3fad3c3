package rdmadebug

import (
	"bytes"
	"encoding/json"
	"reflect"
	"sort"
	"strings"
	"time"
	"unicode"
)

// The JSON the handler serves is the rdma package's structs as they are,
// field by field in their order, with the names an operator's tools
// expect: snake_case ("bytes_sent", "rtt", "listener_id"); durations as
// strings with their unit ("1.5ms", as time.Duration prints them, to the
// microsecond); times in RFC 3339; and a field left out when it is empty
// (zero, "", false, an empty list or map; a negative duration, which
// ConnStats uses for "never").

// object is a JSON object whose keys keep their order.
type object []member

type member struct {
	key   string
	value any
}

func (o object) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, m := range o {
		if i > 0 {
			b.WriteByte(',')
		}
		k, _ := json.Marshal(m.key)
		b.Write(k)
		b.WriteByte(':')
		v, err := json.Marshal(m.value)
		if err != nil {
			return nil, err
		}
		b.Write(v)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

var (
	durationType = reflect.TypeFor[time.Duration]()
	timeType     = reflect.TypeFor[time.Time]()
)

// toJSON converts v (a struct, slice, map or plain value) as above; ok is
// false when v is empty and is to be left out.
func toJSON(v reflect.Value) (out any, ok bool) {
	switch {
	case v.Type() == durationType:
		d := time.Duration(v.Int())
		if d <= 0 {
			return nil, false
		}
		return d.Round(time.Microsecond).String(), true
	case v.Type() == timeType:
		t := v.Interface().(time.Time)
		if t.IsZero() {
			return nil, false
		}
		return t.UTC().Format(time.RFC3339Nano), true
	}
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			return nil, false
		}
		return toJSON(v.Elem())
	case reflect.Struct:
		var o object
		for i := range v.NumField() {
			f := v.Type().Field(i)
			if !f.IsExported() {
				continue
			}
			if x, ok := toJSON(v.Field(i)); ok {
				o = append(o, member{snake(f.Name), x})
			}
		}
		return o, true // an empty struct stays: {}
	case reflect.Slice, reflect.Array:
		if v.Len() == 0 {
			return nil, false
		}
		list := make([]any, v.Len())
		for i := range list {
			x, ok := toJSON(v.Index(i))
			if !ok {
				x = zeroJSON(v.Index(i))
			}
			list[i] = x
		}
		return list, true
	case reflect.Map:
		if v.Len() == 0 {
			return nil, false
		}
		keys := v.MapKeys()
		sort.Slice(keys, func(i, j int) bool { return keys[i].String() < keys[j].String() })
		o := make(object, 0, len(keys))
		for _, k := range keys {
			x, ok := toJSON(v.MapIndex(k))
			if !ok {
				x = zeroJSON(v.MapIndex(k))
			}
			o = append(o, member{k.String(), x})
		}
		return o, true
	}
	if v.IsZero() {
		return nil, false
	}
	return v.Interface(), true
}

// zeroJSON is an element of a list or map that is empty: kept, as its
// position or key says something.
func zeroJSON(v reflect.Value) any {
	switch v.Type() {
	case durationType, timeType:
		return nil
	}
	return v.Interface()
}

// snake turns a Go field name into snake_case: BytesSent bytes_sent, RTT
// rtt, ListenerID listener_id, RNRNaksSent rnr_naks_sent, HWCounters
// hw_counters.
func snake(name string) string {
	r := []rune(name)
	var b strings.Builder
	for i, c := range r {
		if unicode.IsUpper(c) {
			// A word starts at an upper-case letter after a lower-case
			// one or a digit, or before a lower-case one in a run of
			// upper-case ones (RNRNaks: rnr, naks).
			if i > 0 && (!unicode.IsUpper(r[i-1]) || i+1 < len(r) && unicode.IsLower(r[i+1])) {
				b.WriteByte('_')
			}
			c = unicode.ToLower(c)
		}
		b.WriteRune(c)
	}
	return b.String()
}

// marshal is v as the handler's indented JSON, with a final newline.
func marshal(v any) []byte {
	x, ok := toJSON(reflect.ValueOf(v))
	if !ok {
		x = object{}
	}
	b, err := json.MarshalIndent(x, "", "  ")
	if err != nil {
		b = []byte(`{"error":` + string(mustQuote(err.Error())) + `}`)
	}
	return append(b, '\n')
}

func mustQuote(s string) []byte {
	b, _ := json.Marshal(s)
	return b
}

// jsonValue is v as the handler's JSON value (for expvar).
func jsonValue(v any) any {
	x, ok := toJSON(reflect.ValueOf(v))
	if !ok {
		return object{}
	}
	return x
}
