// nomad-apicheck: does a JSON body decode into the named type of Nomad's own Go API
// (github.com/hashicorp/nomad/api), every key with its meaning?
//
// Nomad's HTTP agent decodes request bodies into these types with encoding/json, which
// silently drops a key no field takes (a misspelt "RestartPolicy" runs the job with the
// defaults). So this checker refuses unknown keys, as json.Decoder.DisallowUnknownFields
// would, and names every problem with its JSON path, one per line.
//
// Usage:
//
//	nomad-apicheck TYPE < body.json   problems on stdout, one a line; exit 1 when any
//	nomad-apicheck -serve             one request a line on stdin: {"type": T, "body": B};
//	                                  one answer a line on stdout: {"problems": [...]}
//	nomad-apicheck -types             the type names it knows, one a line
//
// TYPE is an api type name ("Job", "JobRegisterRequest", ...), "[]" before it for a list.
package main

import (
	"bufio"
	"bytes"
	"encoding"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"reflect"
	"sort"
	"strconv"
	"strings"

	"github.com/hashicorp/nomad/api"
)

// The bodies python-nomad sends and reads, and the double serves.
var types = map[string]reflect.Type{
	"AllocStopResponse":      reflect.TypeOf(api.AllocStopResponse{}),
	"Allocation":             reflect.TypeOf(api.Allocation{}),
	"AllocationListStub":     reflect.TypeOf(api.AllocationListStub{}),
	"Evaluation":             reflect.TypeOf(api.Evaluation{}),
	"Job":                    reflect.TypeOf(api.Job{}),
	"JobDeregisterResponse":  reflect.TypeOf(api.JobDeregisterResponse{}),
	"JobListStub":            reflect.TypeOf(api.JobListStub{}),
	"JobRegisterRequest":     reflect.TypeOf(api.JobRegisterRequest{}),
	"JobRegisterResponse":    reflect.TypeOf(api.JobRegisterResponse{}),
	"JobScaleStatusResponse": reflect.TypeOf(api.JobScaleStatusResponse{}),
	"JobSummary":             reflect.TypeOf(api.JobSummary{}),
	"JobValidateRequest":     reflect.TypeOf(api.JobValidateRequest{}),
	"JobValidateResponse":    reflect.TypeOf(api.JobValidateResponse{}),
	"Namespace":              reflect.TypeOf(api.Namespace{}),
	"ScalingRequest":         reflect.TypeOf(api.ScalingRequest{}),
	"Variable":               reflect.TypeOf(api.Variable{}),
	"VariableMetadata":       reflect.TypeOf(api.VariableMetadata{}),
	"string":                 reflect.TypeOf(""),
}

var (
	unmarshalerType     = reflect.TypeOf((*json.Unmarshaler)(nil)).Elem()
	textUnmarshalerType = reflect.TypeOf((*encoding.TextUnmarshaler)(nil)).Elem()
)

func lookup(name string) (reflect.Type, error) {
	if rest, ok := strings.CutPrefix(name, "[]"); ok {
		elem, err := lookup(rest)
		if err != nil {
			return nil, err
		}
		return reflect.SliceOf(elem), nil
	}
	if t, ok := types[name]; ok {
		return t, nil
	}
	return nil, fmt.Errorf("unknown type %q (nomad-apicheck -types lists them)", name)
}

// Check names every problem of body as a value of t: a key no field takes, a value of the
// wrong JSON kind, a number out of range. Then the strict standard decoder has the last
// word, so nothing it refuses can pass.
func Check(t reflect.Type, body []byte) []string {
	decoder := json.NewDecoder(bytes.NewReader(body))
	decoder.UseNumber()
	var value any
	if err := decoder.Decode(&value); err != nil {
		return []string{"$: not JSON: " + err.Error()}
	}
	var problems []string
	walk(t, value, "$", &problems)
	if len(problems) > 0 {
		return problems
	}
	strict := json.NewDecoder(bytes.NewReader(body))
	strict.DisallowUnknownFields()
	if err := strict.Decode(reflect.New(t).Interface()); err != nil {
		return []string{"$: " + err.Error()}
	}
	return nil
}

func walk(t reflect.Type, value any, path string, problems *[]string) {
	if value == nil {
		return // null leaves any Go value as it is
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if reflect.PointerTo(t).Implements(unmarshalerType) {
		decodeAlone(t, value, path, problems)
		return
	}
	if _, isString := value.(string); isString && t.Kind() != reflect.String &&
		reflect.PointerTo(t).Implements(textUnmarshalerType) {
		decodeAlone(t, value, path, problems)
		return
	}
	switch t.Kind() {
	case reflect.Struct:
		walkStruct(t, value, path, problems)
	case reflect.Map:
		walkMap(t, value, path, problems)
	case reflect.Slice, reflect.Array:
		walkList(t, value, path, problems)
	case reflect.Interface:
	default:
		if problem := scalar(t, value); problem != "" {
			*problems = append(*problems, path+": "+problem)
		}
	}
}

func decodeAlone(t reflect.Type, value any, path string, problems *[]string) {
	raw, _ := json.Marshal(value)
	if err := json.Unmarshal(raw, reflect.New(t).Interface()); err != nil {
		*problems = append(*problems, path+": "+err.Error())
	}
}

func walkStruct(t reflect.Type, value any, path string, problems *[]string) {
	object, ok := value.(map[string]any)
	if !ok {
		*problems = append(*problems, fmt.Sprintf("%s: %s is not an object (%s)", path, kind(value), t.Name()))
		return
	}
	fields := fieldsOf(t)
	keys := make([]string, 0, len(object))
	for key := range object {
		keys = append(keys, key)
	}
	sort.Strings(keys)
	for _, key := range keys {
		field, found := fields.find(key)
		if !found {
			*problems = append(*problems, fmt.Sprintf(
				"%s.%s: unknown field: %s has no field %q (Nomad would silently ignore it)",
				path, key, t.Name(), key))
			continue
		}
		walk(field, object[key], path+"."+key, problems)
	}
}

func walkMap(t reflect.Type, value any, path string, problems *[]string) {
	object, ok := value.(map[string]any)
	if !ok {
		*problems = append(*problems, fmt.Sprintf("%s: %s is not an object (%s)", path, kind(value), t))
		return
	}
	keys := make([]string, 0, len(object))
	for key := range object {
		keys = append(keys, key)
	}
	sort.Strings(keys)
	for _, key := range keys {
		if k := t.Key().Kind(); k != reflect.String && !reflect.PointerTo(t.Key()).Implements(textUnmarshalerType) {
			if _, err := strconv.ParseInt(key, 10, 64); err != nil {
				*problems = append(*problems, fmt.Sprintf("%s: key %q is not a %s", path, key, t.Key()))
				continue
			}
		}
		walk(t.Elem(), object[key], fmt.Sprintf("%s[%q]", path, key), problems)
	}
}

func walkList(t reflect.Type, value any, path string, problems *[]string) {
	if t.Elem().Kind() == reflect.Uint8 && t.Kind() == reflect.Slice { // []byte is base64 text
		if _, ok := value.(string); !ok {
			*problems = append(*problems, fmt.Sprintf("%s: %s is not a base64 string", path, kind(value)))
		}
		return
	}
	items, ok := value.([]any)
	if !ok {
		*problems = append(*problems, fmt.Sprintf("%s: %s is not an array (%s)", path, kind(value), t))
		return
	}
	for i, item := range items {
		walk(t.Elem(), item, fmt.Sprintf("%s[%d]", path, i), problems)
	}
}

// scalar: "" when value fits a Go value of kind t, else why not.
func scalar(t reflect.Type, value any) string {
	switch t.Kind() {
	case reflect.Bool:
		if _, ok := value.(bool); ok {
			return ""
		}
	case reflect.String:
		if _, ok := value.(string); ok {
			return ""
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		if n, ok := value.(json.Number); ok {
			if _, err := strconv.ParseInt(string(n), 10, t.Bits()); err != nil {
				return fmt.Sprintf("%s does not fit a %s", n, t)
			}
			return ""
		}
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		if n, ok := value.(json.Number); ok {
			if _, err := strconv.ParseUint(string(n), 10, t.Bits()); err != nil {
				return fmt.Sprintf("%s does not fit a %s", n, t)
			}
			return ""
		}
	case reflect.Float32, reflect.Float64:
		if n, ok := value.(json.Number); ok {
			f, err := strconv.ParseFloat(string(n), t.Bits())
			if err != nil || math.IsInf(f, 0) {
				return fmt.Sprintf("%s does not fit a %s", n, t)
			}
			return ""
		}
	}
	return fmt.Sprintf("%s is not a %s", kind(value), goKind(t))
}

func goKind(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Bool:
		return "boolean"
	case reflect.String:
		return "string"
	default:
		return "number (" + t.String() + ")"
	}
}

func kind(value any) string {
	switch v := value.(type) {
	case string:
		return strconv.Quote(v)
	case json.Number:
		return string(v)
	case bool:
		return strconv.FormatBool(v)
	case []any:
		return "an array"
	case map[string]any:
		return "an object"
	}
	return fmt.Sprintf("%v", value)
}

func main() {
	if len(os.Args) == 2 && os.Args[1] == "-serve" {
		os.Exit(serve(os.Stdin, os.Stdout))
	}
	if len(os.Args) == 2 && os.Args[1] == "-types" {
		names := make([]string, 0, len(types))
		for name := range types {
			names = append(names, name)
		}
		sort.Strings(names)
		fmt.Println(strings.Join(names, "\n"))
		return
	}
	if len(os.Args) != 2 || strings.HasPrefix(os.Args[1], "-") {
		fmt.Fprintln(os.Stderr, "usage: nomad-apicheck TYPE < body.json | -serve | -types")
		os.Exit(2)
	}
	t, err := lookup(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, "nomad-apicheck:", err)
		os.Exit(2)
	}
	body, err := io.ReadAll(os.Stdin)
	if err != nil {
		fmt.Fprintln(os.Stderr, "nomad-apicheck:", err)
		os.Exit(2)
	}
	problems := Check(t, body)
	for _, problem := range problems {
		fmt.Println(problem)
	}
	if len(problems) > 0 {
		os.Exit(1)
	}
}

type request struct {
	Type string          `json:"type"`
	Body json.RawMessage `json:"body"`
}

type answer struct {
	Problems []string `json:"problems"`
	Error    string   `json:"error,omitempty"`
}

func serve(in io.Reader, out io.Writer) int {
	scanner := bufio.NewScanner(in)
	scanner.Buffer(make([]byte, 1<<20), 64<<20)
	writer := bufio.NewWriter(out)
	encoder := json.NewEncoder(writer)
	for scanner.Scan() {
		var req request
		reply := answer{Problems: []string{}}
		if err := json.Unmarshal(scanner.Bytes(), &req); err != nil {
			reply.Error = "bad request line: " + err.Error()
		} else if t, err := lookup(req.Type); err != nil {
			reply.Error = err.Error()
		} else if problems := Check(t, req.Body); problems != nil {
			reply.Problems = problems
		}
		if err := encoder.Encode(reply); err != nil {
			return 1
		}
		if err := writer.Flush(); err != nil {
			return 1
		}
	}
	if err := scanner.Err(); err != nil {
		fmt.Fprintln(os.Stderr, "nomad-apicheck:", err)
		return 1
	}
	return 0
}
