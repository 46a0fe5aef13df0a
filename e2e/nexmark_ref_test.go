package e2e_test

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/eddy-stream/eddy/connectors/nexmark"
)

// Reference computations of the Nexmark queries (configs/nexmark): each
// computes, in plain Go over the events of the nexmark source's generator,
// the table the query's SQL defines (nexmark-flink's queries/qN.sql, with
// the refinements each query file states in its header). They share no
// code with the pipelines: a result that both agree on is the query's.

// nxPerson, nxAuction and nxBid are the three kinds of Nexmark events.
type nxPerson struct {
	id                                    int64
	name, email, card, city, state, extra string
	ts                                    int64
}

type nxAuction struct {
	id                                                 int64
	itemName, description, extra                       string
	initialBid, reserve, ts, expires, seller, category int64
}

type nxBid struct {
	auction, bidder, price int64
	channel, url, extra    string
	ts                     int64
}

// nxEvents is the events of a run, by kind, each kind in event order.
type nxEvents struct {
	persons  []nxPerson
	auctions []nxAuction
	bids     []nxBid
}

// nexmarkEvents generates the first n events of the nexmark source with
// its defaults but for rate (events per second of event time).
func nexmarkEvents(n int64, rate float64) nxEvents {
	cfg := nexmark.NewConfig()
	cfg.Rate = rate
	g := nexmark.NewGenerator(cfg, nexmark.DefaultBaseTime)
	var ev nxEvents
	for i := range n {
		e := g.Event(i)
		switch e["event_type"].(int64) {
		case nexmark.TypePerson:
			p := e["person"].(map[string]any)
			ev.persons = append(ev.persons, nxPerson{
				id: p["id"].(int64), name: p["name"].(string), email: p["email_address"].(string),
				card: p["credit_card"].(string), city: p["city"].(string), state: p["state"].(string),
				extra: p["extra"].(string), ts: p["date_time"].(int64),
			})
		case nexmark.TypeAuction:
			a := e["auction"].(map[string]any)
			ev.auctions = append(ev.auctions, nxAuction{
				id: a["id"].(int64), itemName: a["item_name"].(string), description: a["description"].(string),
				extra: a["extra"].(string), initialBid: a["initial_bid"].(int64), reserve: a["reserve"].(int64),
				ts: a["date_time"].(int64), expires: a["expires"].(int64), seller: a["seller"].(int64),
				category: a["category"].(int64),
			})
		default:
			b := e["bid"].(map[string]any)
			ev.bids = append(ev.bids, nxBid{
				auction: b["auction"].(int64), bidder: b["bidder"].(int64), price: b["price"].(int64),
				channel: b["channel"].(string), url: b["url"].(string), extra: b["extra"].(string),
				ts: b["date_time"].(int64),
			})
		}
	}
	return ev
}

// nxRow is one row of a query's result.
type nxRow = map[string]any

// euros is 0.908 × price as the query files compute it: the float
// nearest to the exact decimal.
func euros(price int64) float64 { return float64(price*908) / 1000 }

func refQ0(ev nxEvents) []nxRow {
	out := make([]nxRow, len(ev.bids))
	for i, b := range ev.bids {
		out[i] = nxRow{"auction": b.auction, "bidder": b.bidder, "price": b.price, "date_time": b.ts, "extra": b.extra}
	}
	return out
}

func refQ1(ev nxEvents) []nxRow {
	out := refQ0(ev)
	for i, b := range ev.bids {
		out[i]["price"] = euros(b.price)
	}
	return out
}

func refQ2(ev nxEvents) []nxRow {
	var out []nxRow
	for _, b := range ev.bids {
		if b.auction%123 == 0 {
			out = append(out, nxRow{"auction": b.auction, "price": b.price})
		}
	}
	return out
}

func refQ3(ev nxEvents) []nxRow {
	people := map[int64][]nxPerson{}
	for _, p := range ev.persons {
		if p.state == "OR" || p.state == "ID" || p.state == "CA" {
			people[p.id] = append(people[p.id], p)
		}
	}
	var out []nxRow
	for _, a := range ev.auctions {
		if a.category != 10 {
			continue
		}
		for _, p := range people[a.seller] {
			out = append(out, nxRow{"name": p.name, "city": p.city, "state": p.state, "id": a.id})
		}
	}
	return out
}

// bidsInAuction returns, per auction id, the bids on it made between its
// start and its expiry, both included: the join of q4 and q9.
func bidsInAuction(ev nxEvents) map[int64][]nxBid {
	byAuction := map[int64][]nxBid{}
	for _, b := range ev.bids {
		byAuction[b.auction] = append(byAuction[b.auction], b)
	}
	out := map[int64][]nxBid{}
	for _, a := range ev.auctions {
		for _, b := range byAuction[a.id] {
			if b.ts >= a.ts && b.ts <= a.expires {
				out[a.id] = append(out[a.id], b)
			}
		}
	}
	return out
}

func refQ4(ev nxEvents) []nxRow {
	in := bidsInAuction(ev)
	type acc struct{ sum, n int64 }
	perCategory := map[int64]*acc{}
	for _, a := range ev.auctions {
		bids := in[a.id]
		if len(bids) == 0 {
			continue
		}
		final := slices.MaxFunc(bids, func(x, y nxBid) int { return cmp.Compare(x.price, y.price) }).price
		c := perCategory[a.category]
		if c == nil {
			c = &acc{}
			perCategory[a.category] = c
		}
		c.sum += final
		c.n++
	}
	var out []nxRow
	for cat, c := range perCategory {
		out = append(out, nxRow{"category": cat, "final": c.sum / c.n})
	}
	return out
}

func refQ5(ev nxEvents) []nxRow {
	const size, slide = 10_000, 2_000
	type key struct{ start, auction int64 }
	counts := map[key]int64{}
	for _, b := range ev.bids {
		last := b.ts - b.ts%slide
		for start := last; start > b.ts-size; start -= slide {
			counts[key{start, b.auction}]++
		}
	}
	maxn := map[int64]int64{}
	for k, n := range counts {
		maxn[k.start] = max(maxn[k.start], n)
	}
	var out []nxRow
	for k, n := range counts {
		if n >= maxn[k.start] {
			out = append(out, nxRow{"auction": k.auction, "num": n})
		}
	}
	return out
}

func refQ7(ev nxEvents) []nxRow {
	const size = 10_000
	maxPrice := map[int64]int64{} // by window end
	for _, b := range ev.bids {
		end := b.ts - b.ts%size + size
		if p, ok := maxPrice[end]; !ok || b.price > p {
			maxPrice[end] = b.price
		}
	}
	var out []nxRow
	for _, b := range ev.bids {
		for end, p := range maxPrice {
			if b.price == p && b.ts >= end-size && b.ts <= end {
				out = append(out, nxRow{"auction": b.auction, "price": b.price, "bidder": b.bidder, "date_time": b.ts, "extra": b.extra})
			}
		}
	}
	return out
}

func refQ8(ev nxEvents) []nxRow {
	const size = 10_000
	type key struct{ id, start int64 }
	sellers := map[key]bool{}
	for _, a := range ev.auctions {
		sellers[key{a.seller, a.ts - a.ts%size}] = true
	}
	var out []nxRow
	for _, p := range ev.persons {
		start := p.ts - p.ts%size
		if sellers[key{p.id, start}] {
			out = append(out, nxRow{"id": p.id, "name": p.name, "starttime": start})
		}
	}
	return out
}

// winningOrder orders q9's candidate bids, the winner first: highest
// price, then earliest, then least bidder, then least extra.
func winningOrder(x, y nxBid) int {
	return cmp.Or(cmp.Compare(y.price, x.price), cmp.Compare(x.ts, y.ts),
		cmp.Compare(x.bidder, y.bidder), cmp.Compare(x.extra, y.extra))
}

func refQ9(ev nxEvents) ([]nxRow, error) {
	in := bidsInAuction(ev)
	var out []nxRow
	for _, a := range ev.auctions {
		bids := slices.Clone(in[a.id])
		if len(bids) == 0 {
			continue
		}
		slices.SortFunc(bids, winningOrder)
		if len(bids) > 1 && winningOrder(bids[0], bids[1]) == 0 {
			return nil, fmt.Errorf("q9: auction %d has two winning bids that tie in every field compared", a.id)
		}
		b := bids[0]
		out = append(out, nxRow{
			"id": a.id, "item_name": a.itemName, "description": a.description, "initial_bid": a.initialBid,
			"reserve": a.reserve, "date_time": a.ts, "expires": a.expires, "seller": a.seller,
			"category": a.category, "extra": a.extra,
			"auction": b.auction, "bidder": b.bidder, "price": b.price, "bid_date_time": b.ts, "bid_extra": b.extra,
		})
	}
	return out, nil
}

func refQ11(ev nxEvents) []nxRow {
	const gap = 10_000
	type session struct{ start, last, n int64 }
	open := map[int64]*session{}
	var out []nxRow
	emit := func(bidder int64, s *session) {
		out = append(out, nxRow{"bidder": bidder, "bid_count": s.n, "starttime": s.start, "endtime": s.last + gap})
	}
	// Bids come in time order: a bid within the gap of its bidder's last
	// one (the windows [ts, ts + gap) overlap or touch) extends the
	// session, a later one starts a new one.
	for _, b := range ev.bids {
		s := open[b.bidder]
		if s != nil && b.ts <= s.last+gap {
			s.last = max(s.last, b.ts)
			s.n++
			continue
		}
		if s != nil {
			emit(b.bidder, s)
		}
		open[b.bidder] = &session{start: b.ts, last: b.ts, n: 1}
	}
	for bidder, s := range open {
		emit(bidder, s)
	}
	return out
}

// bidsPerBidder counts q12's bids per bidder, its result summed over the
// windows.
func bidsPerBidder(ev nxEvents) map[int64]int64 {
	out := map[int64]int64{}
	for _, b := range ev.bids {
		out[b.bidder]++
	}
	return out
}

func refQ13(ev nxEvents) []nxRow {
	out := make([]nxRow, len(ev.bids))
	for i, b := range ev.bids {
		out[i] = nxRow{"auction": b.auction, "bidder": b.bidder, "price": b.price, "date_time": b.ts,
			"value": strconv.FormatInt(b.auction%10_000, 10)}
	}
	return out
}

func refQ14(ev nxEvents) []nxRow {
	var out []nxRow
	for _, b := range ev.bids {
		// 0.908 × price in (1,000,000, 50,000,000), in exact decimals.
		if b.price*908 <= 1_000_000_000 || b.price*908 >= 50_000_000_000 {
			continue
		}
		hour := time.UnixMilli(b.ts).UTC().Hour()
		kind := "otherTime"
		switch {
		case hour >= 8 && hour <= 18:
			kind = "dayTime"
		case hour <= 6 || hour >= 20:
			kind = "nightTime"
		}
		out = append(out, nxRow{
			"auction": b.auction, "bidder": b.bidder, "price": euros(b.price), "bid_time_type": kind,
			"date_time": b.ts, "extra": b.extra, "c_counts": int64(strings.Count(b.extra, "c")),
		})
	}
	return out
}

// day is DATE_FORMAT(ts, 'yyyy-MM-dd') in UTC.
func day(ts int64) string { return time.UnixMilli(ts).UTC().Format(time.DateOnly) }

// priceRank is the price level of q15 to q17: 1 below 10,000, 2 below
// 1,000,000, else 3.
func priceRank(price int64) int {
	switch {
	case price < 10_000:
		return 1
	case price < 1_000_000:
		return 2
	}
	return 3
}

// bidStats are the counts of q15 and q16 for one group.
type bidStats struct {
	bids     [4]int64 // [0] all, [r] of rank r
	bidders  [4]map[int64]bool
	auctions [4]map[int64]bool
	minute   string
}

func (s *bidStats) add(b nxBid) {
	for _, r := range []int{0, priceRank(b.price)} {
		s.bids[r]++
		if s.bidders[r] == nil {
			s.bidders[r], s.auctions[r] = map[int64]bool{}, map[int64]bool{}
		}
		s.bidders[r][b.bidder] = true
		s.auctions[r][b.auction] = true
	}
	s.minute = max(s.minute, time.UnixMilli(b.ts).UTC().Format("15:04"))
}

func (s *bidStats) row() nxRow {
	row := nxRow{}
	for r, name := range []string{"total", "rank1", "rank2", "rank3"} {
		row[name+"_bids"] = s.bids[r]
		row[name+"_bidders"] = int64(len(s.bidders[r]))
		row[name+"_auctions"] = int64(len(s.auctions[r]))
	}
	return row
}

func refQ15(ev nxEvents) []nxRow {
	days := map[string]*bidStats{}
	for _, b := range ev.bids {
		d := day(b.ts)
		if days[d] == nil {
			days[d] = &bidStats{}
		}
		days[d].add(b)
	}
	var out []nxRow
	for d, s := range days {
		row := s.row()
		row["day"] = d
		out = append(out, row)
	}
	return out
}

func refQ16(ev nxEvents) []nxRow {
	type key struct{ channel, day string }
	groups := map[key]*bidStats{}
	for _, b := range ev.bids {
		k := key{b.channel, day(b.ts)}
		if groups[k] == nil {
			groups[k] = &bidStats{}
		}
		groups[k].add(b)
	}
	var out []nxRow
	for k, s := range groups {
		row := s.row()
		row["channel"], row["day"], row["minute"] = k.channel, k.day, s.minute
		out = append(out, row)
	}
	return out
}

func refQ17(ev nxEvents) []nxRow {
	type key struct {
		auction int64
		day     string
	}
	type acc struct{ total, lo, hi, sum int64 }
	groups := map[key]*acc{}
	ranks := map[key]*[4]int64{}
	for _, b := range ev.bids {
		k := key{b.auction, day(b.ts)}
		a := groups[k]
		if a == nil {
			a = &acc{lo: b.price, hi: b.price}
			groups[k], ranks[k] = a, &[4]int64{}
		}
		a.total++
		a.lo, a.hi = min(a.lo, b.price), max(a.hi, b.price)
		a.sum += b.price
		ranks[k][priceRank(b.price)]++
	}
	var out []nxRow
	for k, a := range groups {
		r := ranks[k]
		out = append(out, nxRow{
			"auction": k.auction, "day": k.day, "total_bids": a.total,
			"rank1_bids": r[1], "rank2_bids": r[2], "rank3_bids": r[3],
			"min_price": a.lo, "max_price": a.hi, "avg_price": a.sum / a.total, "sum_price": a.sum,
		})
	}
	return out
}

// lastOrder orders q18's bids of a key, the last one last: by time, then
// price, then extra.
func lastOrder(x, y nxBid) int {
	return cmp.Or(cmp.Compare(x.ts, y.ts), cmp.Compare(x.price, y.price), cmp.Compare(x.extra, y.extra))
}

func refQ18(ev nxEvents) ([]nxRow, error) {
	type key struct{ bidder, auction int64 }
	last := map[key]nxBid{}
	for _, b := range ev.bids {
		k := key{b.bidder, b.auction}
		l, ok := last[k]
		switch {
		case !ok || lastOrder(b, l) > 0:
			last[k] = b
		case lastOrder(b, l) == 0:
			return nil, fmt.Errorf("q18: bidder %d has two last bids on auction %d that tie in every field compared", k.bidder, k.auction)
		}
	}
	var out []nxRow
	for _, b := range last {
		out = append(out, bidRow(b))
	}
	return out, nil
}

// bidRow is every field of a bid.
func bidRow(b nxBid) nxRow {
	return nxRow{"auction": b.auction, "bidder": b.bidder, "price": b.price, "channel": b.channel,
		"url": b.url, "date_time": b.ts, "extra": b.extra}
}

// topOrder orders q19's bids of an auction, the first ranked first:
// highest price, then earliest, then least bidder, then least extra.
func topOrder(x, y nxBid) int {
	return cmp.Or(cmp.Compare(y.price, x.price), cmp.Compare(x.ts, y.ts),
		cmp.Compare(x.bidder, y.bidder), cmp.Compare(x.extra, y.extra))
}

func refQ19(ev nxEvents) ([]nxRow, error) {
	byAuction := map[int64][]nxBid{}
	for _, b := range ev.bids {
		byAuction[b.auction] = append(byAuction[b.auction], b)
	}
	var out []nxRow
	for auction, bids := range byAuction {
		slices.SortFunc(bids, topOrder)
		for i := range min(len(bids), 11) - 1 {
			if topOrder(bids[i], bids[i+1]) == 0 {
				return nil, fmt.Errorf("q19: auction %d has two bids at rank %d that tie in every field compared", auction, i+1)
			}
		}
		for i, b := range bids[:min(len(bids), 10)] {
			row := bidRow(b)
			row["rank_number"] = int64(i + 1)
			out = append(out, row)
		}
	}
	return out, nil
}

func refQ20(ev nxEvents) []nxRow {
	auctions := map[int64][]nxAuction{}
	for _, a := range ev.auctions {
		if a.category == 10 {
			auctions[a.id] = append(auctions[a.id], a)
		}
	}
	var out []nxRow
	for _, b := range ev.bids {
		for _, a := range auctions[b.auction] {
			out = append(out, nxRow{
				"auction": b.auction, "bidder": b.bidder, "price": b.price, "channel": b.channel, "url": b.url,
				"bid_date_time": b.ts, "bid_extra": b.extra,
				"item_name": a.itemName, "description": a.description, "initial_bid": a.initialBid,
				"reserve": a.reserve, "auction_date_time": a.ts, "expires": a.expires, "seller": a.seller,
				"category": a.category, "auction_extra": a.extra,
			})
		}
	}
	return out
}

// urlChannelID is REGEXP_EXTRACT(url, '(&|^)channel_id=([^&]*)', 2)
// written out: the value of the first channel_id parameter that starts
// the URL or follows a '&', up to the next '&'; ok is false without one.
func urlChannelID(url string) (id string, ok bool) {
	const param = "channel_id="
	for i := 0; i+len(param) <= len(url); i++ {
		if (i == 0 || url[i-1] == '&') && strings.HasPrefix(url[i:], param) {
			v := url[i+len(param):]
			if j := strings.IndexByte(v, '&'); j >= 0 {
				v = v[:j]
			}
			return v, true
		}
	}
	return "", false
}

func refQ21(ev nxEvents) []nxRow {
	known := map[string]string{"apple": "0", "google": "1", "facebook": "2", "baidu": "3"}
	var out []nxRow
	for _, b := range ev.bids {
		id, ok := known[strings.ToLower(b.channel)]
		if !ok {
			id, ok = urlChannelID(b.url)
		}
		if ok {
			out = append(out, nxRow{"auction": b.auction, "bidder": b.bidder, "price": b.price, "channel": b.channel, "channel_id": id})
		}
	}
	return out
}

func refQ22(ev nxEvents) []nxRow {
	out := make([]nxRow, len(ev.bids))
	for i, b := range ev.bids {
		parts := strings.Split(b.url, "/")
		piece := func(i int) any {
			if i < len(parts) {
				return parts[i]
			}
			return nil
		}
		out[i] = nxRow{"auction": b.auction, "bidder": b.bidder, "price": b.price, "channel": b.channel,
			"dir1": piece(3), "dir2": piece(4), "dir3": piece(5)}
	}
	return out
}
