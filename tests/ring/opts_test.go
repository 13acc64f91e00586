package ring

import "github.com/kbridge/kbridge/ring/ringtest"

func ringtestOpts(seg, delta int) ringtest.InjectOpts {
	return ringtest.InjectOpts{SegSize: seg, LenDelta: delta}
}
