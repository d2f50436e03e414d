package clusters

import (
	"reflect"
	"testing"
	"time"

	"github.com/ztpd/ztpd/internal/core"
)

// sumMembers lists Member's fields (and the Node's) by hand, for speed: a
// field added to either and left out of the sum would let a changed member
// keep a cached rendering. Every field must move the sum.
func TestMemberSumCoversEveryField(t *testing.T) {
	set := func(v reflect.Value) {
		switch v.Kind() {
		case reflect.String:
			v.SetString("x")
		case reflect.Bool:
			v.SetBool(true)
		default:
			if v.Type() != reflect.TypeOf(time.Time{}) {
				t.Fatalf("no test value for a %s: extend this test and sumMembers", v.Type())
			}
			v.Set(reflect.ValueOf(time.Unix(1, 2)))
		}
	}
	base := sumMembers([]Member{{Node: &core.NodeObservation{}}})
	mt := reflect.TypeOf(Member{})
	for i := range mt.NumField() {
		m := Member{Node: &core.NodeObservation{}}
		if f := mt.Field(i); f.Name == "Node" {
			if sumMembers([]Member{{}}) == base {
				t.Error("Member.Node: nil and present sum the same")
			}
			nt := reflect.TypeOf(core.NodeObservation{})
			for j := range nt.NumField() {
				n := core.NodeObservation{}
				set(reflect.ValueOf(&n).Elem().Field(j))
				if sumMembers([]Member{{Node: &n}}) == base {
					t.Errorf("NodeObservation.%s does not move the member sum", nt.Field(j).Name)
				}
			}
			continue
		}
		set(reflect.ValueOf(&m).Elem().Field(i))
		if sumMembers([]Member{m}) == base {
			t.Errorf("Member.%s does not move the sum", mt.Field(i).Name)
		}
	}
}
