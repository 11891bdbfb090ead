package rheowatermill_test

import (
	"encoding/json"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rheo-go/rheo"
	rheowatermill "github.com/rheo-go/rheo/watermill"
)

// Marshal stores compact JSON objects as they are and wraps everything
// else; Unmarshal gives back the exact bytes, UUID and metadata.
func TestDefaultMarshaler(t *testing.T) {
	cases := []struct {
		payload string
		asIs    bool
	}{
		{``, false},
		{`x`, false},
		{`42`, false},
		{`[1,2]`, false},
		{`{"a":1,"b":[true,null,"s p a c e"]}`, true},
		{`{}`, true},
		{`{ "a": 1 }`, false},
		{`{"x":}`, false},
		{`{"$bytes":"AAEC"}`, false},
		{`{"$bytes":"AAEC","other":1}`, true},
		{`{"z":"\u0000"}`, false},
		{"{\"k\":\"\xff\"}", false},
		{"\x00\x01\xff", false},
	}
	for _, wrapAll := range []bool{false, true} {
		m := rheowatermill.DefaultMarshaler{WrapAll: wrapAll}
		for _, c := range cases {
			msg := message.NewMessage("id-1", []byte(c.payload))
			msg.Metadata.Set("k", "v")
			out, err := m.Marshal("topic", msg)
			require.NoError(t, err)
			require.True(t, json.Valid(out.Payload), "%q stored as valid JSON", c.payload)
			require.Equal(t, byte('{'), out.Payload[0])
			if c.asIs && !wrapAll {
				assert.Equal(t, c.payload, string(out.Payload), "stored as it is")
			} else {
				assert.Contains(t, string(out.Payload), `{"$bytes":"`, "%q wrapped", c.payload)
			}
			msg.Metadata.Set("k", "changed") // Marshal copied the metadata
			back, err := m.Unmarshal(rheo.Event{ID: out.ID, Payload: out.Payload, Metadata: out.Metadata})
			require.NoError(t, err)
			assert.Equal(t, "id-1", back.UUID)
			assert.Equal(t, c.payload, string(back.Payload))
			assert.Equal(t, "v", back.Metadata.Get("k"))
		}
	}
	_, err := rheowatermill.DefaultMarshaler{}.Unmarshal(rheo.Event{ID: "e", Payload: []byte(`{"$bytes":"!!"}`)})
	require.ErrorContains(t, err, "base64")
	p, err := rheowatermill.UnwrapPayload([]byte(`{"$bytes": "aGk="}`))
	require.NoError(t, err)
	assert.Equal(t, "hi", string(p), "spaced out by a store")
}

// Empty metadata, which every Watermill message starts with, is stored as
// none and comes back as an empty map.
func TestEmptyMetadataIsStoredAsNone(t *testing.T) {
	m := rheowatermill.DefaultMarshaler{}
	out, err := m.Marshal("topic", message.NewMessage("id-1", []byte(`{}`)))
	require.NoError(t, err)
	require.Nil(t, out.Metadata)
	back, err := m.Unmarshal(rheo.Event{ID: out.ID, Payload: out.Payload})
	require.NoError(t, err)
	require.NotNil(t, back.Metadata)
	require.Empty(t, back.Metadata)
}
