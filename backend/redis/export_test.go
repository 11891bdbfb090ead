package redis

import (
	"context"

	goredis "github.com/redis/go-redis/v9"

	"github.com/rheo-go/rheo"
)

// countingFetchScript is fetchScript with every redis.call it makes counted:
// the arguments it sends plus the elements of the reply (top level). The
// count is added to the key "<stream key base>test:touched" (the stream's
// slot), which FetchCounted reads and deletes, the number of partition
// streams its XREADGROUPs read to "<stream key base>test:streams", which
// FetchStreams reads and deletes, and the number of due sets whose
// existence it asked to "<stream key base>test:dueprobes", which
// FetchDueProbes reads and deletes. It measures how much of the
// store one fetch reads and writes, whatever the machine's speed.
var countingFetchScript = goredis.NewScript(`
local __R = redis
local __n = 0
local __s = 0
local __d = 0
local redis = setmetatable({
  call = function(...)
    local r = __R.call(...)
    __n = __n + select('#', ...)
    if type(r) == 'table' then __n = __n + #r end
    if select(1, ...) == 'XREADGROUP' then __s = __s + (select('#', ...) - 8) / 2 end
    if select(1, ...) == 'EXISTS' then
      for __i = 2, select('#', ...) do
        if string.find((select(__i, ...)), ':d:', 1, true) then __d = __d + 1 end
      end
    end
    return r
  end,
}, {__index = __R})
local function __body()
` + fetchSource + `
end
local __out = __body()
__R.call('INCRBY', ARGV[1] .. 'test:touched', __n)
__R.call('INCRBY', ARGV[1] .. 'test:streams', __s)
__R.call('INCRBY', ARGV[1] .. 'test:dueprobes', __d)
return __out
`)

// FetchCounted is Fetch through countingFetchScript: it returns the leases
// and how many elements the script sent to or read from Redis.
func (b *Backend) FetchCounted(ctx context.Context, r rheo.FetchRequest) ([]rheo.Lease, int64, error) {
	ls, err := b.fetch(ctx, countingFetchScript, r)
	if err != nil {
		return nil, 0, err
	}
	n, err := b.c.GetDel(ctx, b.streamBase(r.Stream)+"test:touched").Int64()
	return ls, n, err
}

// FetchDueProbes reads and deletes the count of due sets (d:<p>) whose
// existence the fetches through FetchCounted asked since it last did.
func (b *Backend) FetchDueProbes(ctx context.Context, stream string) (int64, error) {
	return b.c.GetDel(ctx, b.streamBase(stream)+"test:dueprobes").Int64()
}

// FetchStreams reads and deletes the count of partition streams the
// fetches through FetchCounted read since it last did.
func (b *Backend) FetchStreams(ctx context.Context, stream string) (int64, error) {
	return b.c.GetDel(ctx, b.streamBase(stream)+"test:streams").Int64()
}

// GroupKey is the key of group's keys named suffix (e.g. "m", "dk").
func (b *Backend) GroupKey(stream, group, suffix string) string {
	return groupBase(b.streamBase(stream), group) + suffix
}
