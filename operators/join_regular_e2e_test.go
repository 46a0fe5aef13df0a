package operators_test

import (
	"encoding/json"
	"fmt"
	"maps"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/eddy-stream/eddy/pipeline"
)

// A regular join through the real runtime, at parallelism 2: the left
// input is a continuous aggregate's changelog (orders per customer), the
// right one a changelog of customers (a rename: -U, +U). The join writes
// to a retract sink and to an upsert sink; both, folded, must give the
// join of the final tables.
func TestRegularJoinRuntime(t *testing.T) {
	dir := t.TempDir()
	// Orders of customers c0..c6; c6 has no customer row.
	var orderLines []string
	totals := map[string]map[string]any{}
	for i := range 300 {
		c, amount := fmt.Sprintf("c%d", i%7), i%13
		orderLines = append(orderLines, fmt.Sprintf(`{"customer":%q,"amount":%d}`, c, amount))
		if totals[c] == nil {
			totals[c] = map[string]any{"customer": c, "orders": 0, "spent": 0}
		}
		totals[c]["orders"] = totals[c]["orders"].(int) + 1
		totals[c]["spent"] = totals[c]["spent"].(int) + amount
	}
	orders := writeLines(t, dir, "orders.jsonl", orderLines...)
	// Customers c0..c5 and c9 (no orders), some renamed, c5 deleted.
	customers := writeLines(t, dir, "customers.jsonl",
		`{"id":"c0","name":"Ann","_op":"+I"}`,
		`{"id":"c1","name":"Bob"}`,
		`{"id":"c2","name":"Cy"}`,
		`{"id":"c3","name":"Di"}`,
		`{"id":"c4","name":"Ed"}`,
		`{"id":"c5","name":"Flo"}`,
		`{"id":"c9","name":"Gus"}`,
		`{"id":"c0","name":"Ann","_op":"-U"}`,
		`{"id":"c0","name":"Anna","_op":"+U"}`,
		`{"id":"c5","name":"Flo","_op":"-D"}`,
		`{"id":"c3","name":"Di","_op":"-U"}`,
		`{"id":"c3","name":"Dee","_op":"+U"}`,
		`{"id":"c0","name":"Anna","_op":"-U"}`,
		`{"id":"c0","name":"Annie","_op":"+U"}`,
	)
	names := map[string]string{"c0": "Annie", "c1": "Bob", "c2": "Cy", "c3": "Dee", "c4": "Ed", "c9": "Gus"}
	for _, typ := range []string{"inner", "left", "full"} {
		t.Run(typ, func(t *testing.T) {
			retract, upsert := "rj_retract_"+typ, "rj_upsert_"+typ
			reset(retract, upsert)
			runPipeline(t, `version: 1
name: regular-join-e2e
parallelism: 2
sources:
  - id: orders
    type: file
    parallelism: 1
    path: `+orders+`
  - id: customers
    type: file
    parallelism: 1
    path: `+customers+`
steps:
  - id: totals
    from: orders
    key_by: customer
    aggregate: {orders: count(), spent: sum(amount)}
  - id: joined
    join:
      left: totals
      right: customers
      on: {left: customer, right: id}
      type: `+typ+`
      select:
        customer: 'left == nil ? right.id : left.customer'
        orders: left.orders
        spent: left.spent
        name: right.name
sinks:
  - id: every_change
    from: joined
    type: window_test_collect
    name: `+retract+`
  - id: latest
    from: joined
    type: window_test_collect
    name: `+upsert+`
    changelog: upsert
`)
			want := map[string]int{}
			for _, c := range []string{"c0", "c1", "c2", "c3", "c4", "c5", "c6", "c9"} {
				row := map[string]any{"customer": c, "orders": nil, "spent": nil, "name": nil}
				tot, hasTotal := totals[c]
				name, hasName := names[c]
				switch {
				case hasTotal && hasName:
				case hasTotal && typ != "inner":
				case hasName && typ == "full":
				default:
					continue
				}
				if hasTotal {
					maps.Copy(row, tot)
				}
				if hasName {
					row["name"] = name
				}
				want[jsonRow(t, row)]++
			}
			require.Equal(t, want, foldRetract(t, collectedRecords(retract)), "the retract sink's rows, folded")
			require.Equal(t, want, foldUpsert(t, collectedRecords(upsert)), "the upsert sink's rows, folded by customer")
		})
	}
}

// collectedRecords returns what the test sink name received, in order.
func collectedRecords(name string) []pipeline.Record {
	collected.Lock()
	defer collected.Unlock()
	return collected.m[name]
}

// jsonRow is a row's JSON without _op.
func jsonRow(t *testing.T, f map[string]any) string {
	c := maps.Clone(f)
	delete(c, pipeline.OpField)
	b, err := json.Marshal(c)
	require.NoError(t, err)
	return string(b)
}

// foldRetract applies a retract stream to a multiset of rows; a retraction
// must find its row.
func foldRetract(t *testing.T, recs []pipeline.Record) map[string]int {
	table := map[string]int{}
	for _, r := range recs {
		row := jsonRow(t, r.Fields)
		switch r.Fields[pipeline.OpField] {
		case pipeline.OpInsert, pipeline.OpUpdate:
			table[row]++
		case pipeline.OpRetract, pipeline.OpDelete:
			require.Positive(t, table[row], "a retraction of a row the sink does not hold: %s", row)
			if table[row]--; table[row] == 0 {
				delete(table, row)
			}
		default:
			t.Fatalf("a row without a changelog kind: %v", r.Fields)
		}
	}
	return table
}

// foldUpsert keeps the last row per customer: +I and +U replace it, -D
// deletes it; an upsert sink gets no -U.
func foldUpsert(t *testing.T, recs []pipeline.Record) map[string]int {
	last := map[any]string{}
	for _, r := range recs {
		key := r.Fields["customer"]
		switch r.Fields[pipeline.OpField] {
		case pipeline.OpInsert, pipeline.OpUpdate:
			last[key] = jsonRow(t, r.Fields)
		case pipeline.OpDelete:
			delete(last, key)
		default:
			t.Fatalf("an upsert sink got %v", r.Fields)
		}
	}
	table := map[string]int{}
	for _, row := range last {
		table[row]++
	}
	return table
}
