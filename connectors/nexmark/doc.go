// Package nexmark provides the `nexmark` source: the events of the Nexmark
// benchmark (an online auction: people, auctions and bids), generated as
// the reference generator of the Flink Nexmark repository
// (nexmark-flink's NexmarkGenerator and GeneratorConfig) generates them.
//
// # Record schema
//
// Every record is one event, in the shape of the reference's Flink SQL
// table `datagen` with snake_case names:
//
//	event_type  int   0 person, 1 auction, 2 bid
//	person      map   the new person when event_type is 0, else nil
//	auction     map   the new auction when event_type is 1, else nil
//	bid         map   the bid when event_type is 2, else nil
//	date_time   int   the event's time, epoch milliseconds (the table's
//	                  computed column dateTime: the date_time of the
//	                  person, auction or bid)
//
//	person:  id int, name string, email_address string, credit_card string,
//	         city string, state string, date_time int, extra string
//	auction: id int, item_name string, description string, initial_bid int,
//	         reserve int, date_time int, expires int, seller int,
//	         category int, extra string
//	bid:     auction int, bidder int, price int, channel string,
//	         url string, date_time int, extra string
//
// Exactly one of person, auction and bid is a map; the other two are
// present with a nil value. Integers are int64, times are epoch
// milliseconds (int64). A pipeline sets `event_time: date_time` on the
// source, with `watermark.max_out_of_orderness: 4s` as the reference's
// table does (`WATERMARK FOR dateTime AS dateTime - INTERVAL '4' SECOND`);
// the generator's events are in order, so the bound only delays windows.
//
// # Events
//
// Event n (0-based, counted over all subtasks) is that of the reference
// at parallelism 1 with Flink's source settings (first event id 1, first
// event number 1): its id is n+2, its type is given by id %
// (person_proportion + auction_proportion + bid_proportion), 1+3+46 = 50
// by default (0 person, 1-3 auction, 4-49 bid), and its time is
// base_time + floor(floor((n+1) × 1e6/rate µs) / 1000) ms, the delay
// 1e6/rate a float as in the reference. Person and auction ids
// start at 1000, categories at 10. Its fields are drawn from a
// java.util.Random seeded with the event id (javaRandom), in the order the
// reference draws them, so an event depends on its number only: the set of
// events does not depend on the parallelism, on timing or on restores.
//
// Where the current reference is not deterministic (it draws from an
// unseeded SplittableRandom), the generator follows the reference's
// original seeding (java.util.Random seeded with the event id, as Apache
// Beam's Nexmark generator, from which the reference comes, does), and the
// tables the reference fills once at start (the 1 MiB string the extra
// fields are cut from, the channels' URLs) are filled from java.util.Random
// with fixed seeds. At parallelism p the reference splits the event ids
// into p contiguous ranges, each with its own timeline starting at the base
// time; this source keeps one timeline, so its events are the reference's
// at parallelism 1 whatever the parallelism: subtask k of p generates the
// events n = k, k+p, k+2p, ...
package nexmark
