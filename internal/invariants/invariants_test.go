package invariants

import "testing"

func TestCheckPanicsOnlyWhenEnabled(t *testing.T) {
	defer func() {
		r := recover()
		if Enabled {
			v, ok := r.(Violation)
			if !ok || v.Msg != "x is 2" {
				t.Fatalf("recovered %v; want the Violation", r)
			}
		} else if r != nil {
			t.Fatalf("a disabled check panicked: %v", r)
		}
	}()
	Check(true, "never")
	Check(false, "x is %d", 2)
}
