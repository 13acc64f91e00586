package config

import "reflect"

func isStruct(v any) bool {
	return v != nil && reflect.TypeOf(v).Kind() == reflect.Struct
}
