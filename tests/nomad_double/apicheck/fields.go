package main

import (
	"reflect"
	"strings"
	"sync"
)

// fieldSet is what encoding/json sees of a struct: each JSON name with the field's type.
type fieldSet struct {
	byName map[string]reflect.Type
	names  []string
}

// find matches a key as encoding/json does: the exact name first, then case-insensitively.
func (s fieldSet) find(key string) (reflect.Type, bool) {
	if t, ok := s.byName[key]; ok {
		return t, true
	}
	for _, name := range s.names {
		if strings.EqualFold(name, key) {
			return s.byName[name], true
		}
	}
	return nil, false
}

var fieldCache sync.Map // reflect.Type -> fieldSet

type candidate struct {
	name   string
	t      reflect.Type
	depth  int
	tagged bool
}

// fieldsOf applies encoding/json's rules: exported fields, `json:"name"` tags, "-" skipped,
// untagged embedded structs flattened, and of several fields with one name the shallowest
// (then the tagged one) wins; a tie drops the name altogether.
func fieldsOf(t reflect.Type) fieldSet {
	if cached, ok := fieldCache.Load(t); ok {
		return cached.(fieldSet)
	}
	var found []candidate
	collect(t, 0, map[reflect.Type]bool{}, &found)
	best := map[string][]candidate{}
	for _, c := range found {
		best[c.name] = append(best[c.name], c)
	}
	set := fieldSet{byName: map[string]reflect.Type{}}
	for name, cands := range best {
		if winner, ok := dominant(cands); ok {
			set.byName[name] = winner.t
			set.names = append(set.names, name)
		}
	}
	fieldCache.Store(t, set)
	return set
}

func collect(t reflect.Type, depth int, seen map[reflect.Type]bool, out *[]candidate) {
	if seen[t] {
		return
	}
	seen[t] = true
	defer delete(seen, t)
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		ft := f.Type
		if f.Anonymous {
			inner := ft
			if inner.Kind() == reflect.Pointer {
				inner = inner.Elem()
			}
			if !f.IsExported() && inner.Kind() != reflect.Struct {
				continue
			}
			if name == "" && inner.Kind() == reflect.Struct {
				collect(inner, depth+1, seen, out)
				continue
			}
		} else if !f.IsExported() {
			continue
		}
		tagged := name != ""
		if !tagged {
			name = f.Name
		}
		*out = append(*out, candidate{name: name, t: ft, depth: depth, tagged: tagged})
	}
}

func dominant(cands []candidate) (candidate, bool) {
	shallowest := cands[0].depth
	for _, c := range cands {
		shallowest = min(shallowest, c.depth)
	}
	var top []candidate
	for _, c := range cands {
		if c.depth == shallowest {
			top = append(top, c)
		}
	}
	if len(top) == 1 {
		return top[0], true
	}
	var tagged []candidate
	for _, c := range top {
		if c.tagged {
			tagged = append(tagged, c)
		}
	}
	if len(tagged) == 1 {
		return tagged[0], true
	}
	return candidate{}, false
}
