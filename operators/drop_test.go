package operators

import (
	"testing"

	"github.com/eddy-stream/eddy/pipeline"
)

func TestDrop(t *testing.T) {
	runCases(t, []opCase{
		{
			name: "list",
			step: "drop: [email, phone]",
			in:   []pipeline.Record{rec(fields{"id": 1, "email": "e", "phone": "p"}), rec(fields{"id": 2, "phone": "p"})},
			want: []pipeline.Record{rec(fields{"id": 1}), rec(fields{"id": 2})},
		},
		{
			name: "single string",
			step: "drop: email",
			in:   []pipeline.Record{rec(fields{"id": 1, "email": "e"})},
			want: []pipeline.Record{rec(fields{"id": 1})},
		},
		{
			name: "missing fields and nil fields are fine",
			step: "drop: [a]",
			in:   []pipeline.Record{rec(fields{"b": 1}), {Fields: nil, Time: 3, Key: "k"}},
			want: []pipeline.Record{rec(fields{"b": 1}), {Fields: nil, Time: 3, Key: "k"}},
		},
	})
}
