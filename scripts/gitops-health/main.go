// gitops-health reads Kubernetes objects (a JSON list on stdin) and prints,
// for each, the health that GitOps tools compute from it, one JSON object per
// line: kstatus (sigs.k8s.io/cli-utils, the library Flux, kpt and
// `kubectl wait`-style tools use), the Argo CD health Lua script given with
// --argocd (run in gopher-lua, the interpreter Argo CD embeds, with the same
// libraries and object conversion), and Flux healthCheckExprs from the
// Kustomization given with --flux (cel-go with the environment and the
// evaluation order of Flux's runtime/cel).
//
// Built by scripts/install-kube.sh; used by operator/tests/gitops_health.rs.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/ext"
	lua "github.com/yuin/gopher-lua"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/yaml"
)

type verdict struct {
	Name          string `json:"name"`
	Kstatus       string `json:"kstatus"`
	KstatusReason string `json:"kstatusMessage"`
	Argocd        string `json:"argocd"`
	ArgocdMessage string `json:"argocdMessage"`
	Flux          string `json:"flux"`
}

func main() {
	argocd := flag.String("argocd", "", "Argo CD health check (Lua)")
	flux := flag.String("flux", "", "Flux Kustomization with spec.healthCheckExprs (YAML)")
	flag.Parse()
	if err := run(*argocd, *flux); err != nil {
		fmt.Fprintln(os.Stderr, "gitops-health:", err)
		os.Exit(1)
	}
}

func run(argocdPath, fluxPath string) error {
	script, err := os.ReadFile(argocdPath)
	if err != nil {
		return err
	}
	checks, err := fluxChecks(fluxPath)
	if err != nil {
		return err
	}
	// Numbers as the apiserver's clients read them (int64 where integral),
	// which kstatus's accessors require.
	raw, err := io.ReadAll(os.Stdin)
	if err != nil {
		return err
	}
	var objects []any
	if err := utiljson.Unmarshal(raw, &objects); err != nil {
		return fmt.Errorf("stdin: %w", err)
	}
	out := json.NewEncoder(os.Stdout)
	for _, item := range objects {
		o, ok := item.(map[string]any)
		if !ok {
			return fmt.Errorf("stdin: a list of objects expected")
		}
		u := &unstructured.Unstructured{Object: o}
		v := verdict{Name: u.GetName()}
		k, err := status.Compute(u)
		if err != nil {
			return fmt.Errorf("kstatus of %s: %w", u.GetName(), err)
		}
		v.Kstatus, v.KstatusReason = string(k.Status), k.Message
		if v.Argocd, v.ArgocdMessage, err = argocdHealth(string(script), o); err != nil {
			return fmt.Errorf("argo cd health of %s: %w", u.GetName(), err)
		}
		check, ok := checks[u.GetAPIVersion()+"/"+u.GetKind()]
		if !ok {
			return fmt.Errorf("no healthCheckExprs for %s %s", u.GetAPIVersion(), u.GetKind())
		}
		if v.Flux, err = check.evaluate(u); err != nil {
			return fmt.Errorf("flux health of %s: %w", u.GetName(), err)
		}
		if err := out.Encode(v); err != nil {
			return err
		}
	}
	return nil
}

// argocdHealth runs the script as Argo CD does: a fresh state with only the
// base, table, string and math libraries, the object as global `obj`, and
// the returned table's status and message.
func argocdHealth(script string, obj map[string]any) (string, string, error) {
	l := lua.NewState(lua.Options{SkipOpenLibs: true})
	defer l.Close()
	for _, lib := range []struct {
		name string
		open lua.LGFunction
	}{{lua.BaseLibName, lua.OpenBase}, {lua.TabLibName, lua.OpenTable}, {lua.StringLibName, lua.OpenString}, {lua.MathLibName, lua.OpenMath}} {
		l.Push(l.NewFunction(lib.open))
		l.Push(lua.LString(lib.name))
		l.Call(1, 0)
	}
	l.SetGlobal("obj", toLua(l, obj))
	if err := l.DoString(script); err != nil {
		return "", "", err
	}
	result, ok := l.Get(-1).(*lua.LTable)
	if !ok {
		return "", "", fmt.Errorf("the script returned %s, not a table", l.Get(-1).Type())
	}
	return lua.LVAsString(result.RawGetString("status")), lua.LVAsString(result.RawGetString("message")), nil
}

// toLua converts decoded JSON to Lua values: objects and arrays to tables
// (arrays 1-based), numbers to numbers, null to nil.
func toLua(l *lua.LState, v any) lua.LValue {
	switch v := v.(type) {
	case map[string]any:
		t := l.NewTable()
		for k, e := range v {
			t.RawSetString(k, toLua(l, e))
		}
		return t
	case []any:
		t := l.NewTable()
		for _, e := range v {
			t.Append(toLua(l, e))
		}
		return t
	case string:
		return lua.LString(v)
	case float64:
		return lua.LNumber(v)
	case int64:
		return lua.LNumber(v)
	case bool:
		return lua.LBool(v)
	default:
		return lua.LNil
	}
}

type fluxCheck struct {
	inProgress, failed, current cel.Program
}

// fluxChecks reads spec.healthCheckExprs of a Flux Kustomization.
func fluxChecks(path string) (map[string]fluxCheck, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var k struct {
		Spec struct {
			HealthCheckExprs []struct {
				APIVersion string `json:"apiVersion"`
				Kind       string `json:"kind"`
				InProgress string `json:"inProgress"`
				Failed     string `json:"failed"`
				Current    string `json:"current"`
			} `json:"healthCheckExprs"`
		} `json:"spec"`
	}
	// Only the fields read here are declared: the others are skipped.
	if err := yaml.Unmarshal(raw, &k); err != nil {
		return nil, err
	}
	checks := map[string]fluxCheck{}
	for _, e := range k.Spec.HealthCheckExprs {
		var c fluxCheck
		for _, p := range []struct {
			expr string
			prog *cel.Program
		}{{e.InProgress, &c.inProgress}, {e.Failed, &c.failed}, {e.Current, &c.current}} {
			if p.expr == "" {
				continue
			}
			if *p.prog, err = program(p.expr); err != nil {
				return nil, err
			}
		}
		if c.current == nil {
			return nil, fmt.Errorf("%s %s: current is required", e.APIVersion, e.Kind)
		}
		checks[e.APIVersion+"/"+e.Kind] = c
	}
	return checks, nil
}

// program parses an expression in the environment Flux builds for health
// checks (parsed, not compiled: the object's fields are untyped).
func program(expr string) (cel.Program, error) {
	env, err := cel.NewEnv(
		cel.HomogeneousAggregateLiterals(),
		cel.EagerlyValidateDeclarations(true),
		cel.DefaultUTCTimeZone(true),
		cel.CrossTypeNumericComparisons(true),
		cel.OptionalTypes(),
		ext.Strings(),
		ext.Sets(),
		ext.Encoders(),
	)
	if err != nil {
		return nil, err
	}
	ast, issues := env.Parse(expr)
	if issues != nil && issues.Err() != nil {
		return nil, fmt.Errorf("%q: %w", expr, issues.Err())
	}
	return env.Program(ast, cel.EvalOptions(cel.OptOptimize), cel.InterruptCheckFrequency(100))
}

// evaluate follows Flux: an observedGeneration behind the generation is in
// progress; then inProgress, failed and current in that order; none true
// is in progress.
func (c fluxCheck) evaluate(u *unstructured.Unstructured) (string, error) {
	o := u.UnstructuredContent()
	observed, found, err := unstructured.NestedInt64(o, "status", "observedGeneration")
	if err != nil {
		return "", err
	}
	if found && observed != u.GetGeneration() {
		return "InProgress", nil
	}
	for _, step := range []struct {
		prog   cel.Program
		status string
	}{{c.inProgress, "InProgress"}, {c.failed, "Failed"}, {c.current, "Current"}} {
		if step.prog == nil {
			continue
		}
		val, _, err := step.prog.ContextEval(context.Background(), o)
		if err != nil {
			return "", err
		}
		b, ok := val.(types.Bool)
		if !ok {
			return "", fmt.Errorf("not a boolean: %v", val)
		}
		if b {
			return step.status, nil
		}
	}
	return "InProgress", nil
}
