import com.github.nexmark.flink.NexmarkConfiguration;
import com.github.nexmark.flink.generator.GeneratorConfig;
import com.github.nexmark.flink.generator.NexmarkGenerator;
import com.github.nexmark.flink.model.Auction;
import com.github.nexmark.flink.model.Bid;
import com.github.nexmark.flink.model.Event;
import com.github.nexmark.flink.model.Person;

/**
 * Prints events of the (patched) reference generator as JSON lines in the
 * nexmark source's schema, with their event number n: the first `first`
 * events and then every `every`-th one, below `count`.
 *
 * <p>Arguments: count first every rate baseTime personProportion
 * auctionProportion bidProportion hotAuctionRatio hotSellersRatio
 * hotBiddersRatio.
 */
public class Dump {
  public static void main(String[] args) {
    long count = Long.parseLong(args[0]);
    long first = Long.parseLong(args[1]);
    long every = Long.parseLong(args[2]);
    NexmarkConfiguration conf = new NexmarkConfiguration();
    conf.firstEventRate = Integer.parseInt(args[3]);
    conf.nextEventRate = conf.firstEventRate;
    long baseTime = Long.parseLong(args[4]);
    conf.personProportion = Integer.parseInt(args[5]);
    conf.auctionProportion = Integer.parseInt(args[6]);
    conf.bidProportion = Integer.parseInt(args[7]);
    conf.hotAuctionRatio = Integer.parseInt(args[8]);
    conf.hotSellersRatio = Integer.parseInt(args[9]);
    conf.hotBiddersRatio = Integer.parseInt(args[10]);
    conf.numEventGenerators = 1;
    // As Flink's NexmarkTableSourceFactory: first event id 1, first event number 1.
    GeneratorConfig config = new GeneratorConfig(conf, baseTime, 1, count, -1L, 1);
    NexmarkGenerator generator = new NexmarkGenerator(config);
    StringBuilder sb = new StringBuilder();
    for (long n = 0; generator.hasNext(); n++) {
      Event e = generator.next().event;
      if (n >= first && n % every != 0) {
        continue;
      }
      sb.setLength(0);
      sb.append("{\"n\":").append(n).append(",\"event_type\":").append(e.type.value);
      sb.append(",\"person\":");
      person(sb, e.newPerson);
      sb.append(",\"auction\":");
      auction(sb, e.newAuction);
      sb.append(",\"bid\":");
      bid(sb, e.bid);
      long t = e.newPerson != null ? e.newPerson.dateTime.toEpochMilli()
          : e.newAuction != null ? e.newAuction.dateTime.toEpochMilli() : e.bid.dateTime.toEpochMilli();
      sb.append(",\"date_time\":").append(t).append('}');
      System.out.println(sb);
    }
  }

  static void person(StringBuilder sb, Person p) {
    if (p == null) {
      sb.append("null");
      return;
    }
    sb.append("{\"id\":").append(p.id);
    str(sb, "name", p.name);
    str(sb, "email_address", p.emailAddress);
    str(sb, "credit_card", p.creditCard);
    str(sb, "city", p.city);
    str(sb, "state", p.state);
    sb.append(",\"date_time\":").append(p.dateTime.toEpochMilli());
    str(sb, "extra", p.extra);
    sb.append('}');
  }

  static void auction(StringBuilder sb, Auction a) {
    if (a == null) {
      sb.append("null");
      return;
    }
    sb.append("{\"id\":").append(a.id);
    str(sb, "item_name", a.itemName);
    str(sb, "description", a.description);
    sb.append(",\"initial_bid\":").append(a.initialBid);
    sb.append(",\"reserve\":").append(a.reserve);
    sb.append(",\"date_time\":").append(a.dateTime.toEpochMilli());
    sb.append(",\"expires\":").append(a.expires.toEpochMilli());
    sb.append(",\"seller\":").append(a.seller);
    sb.append(",\"category\":").append(a.category);
    str(sb, "extra", a.extra);
    sb.append('}');
  }

  static void bid(StringBuilder sb, Bid b) {
    if (b == null) {
      sb.append("null");
      return;
    }
    sb.append("{\"auction\":").append(b.auction);
    sb.append(",\"bidder\":").append(b.bidder);
    sb.append(",\"price\":").append(b.price);
    str(sb, "channel", b.channel);
    str(sb, "url", b.url);
    sb.append(",\"date_time\":").append(b.dateTime.toEpochMilli());
    str(sb, "extra", b.extra);
    sb.append('}');
  }

  static void str(StringBuilder sb, String key, String v) {
    sb.append(",\"").append(key).append("\":\"");
    for (char c : v.toCharArray()) {
      if (c == '"' || c == '\\') {
        sb.append('\\');
      }
      sb.append(c);
    }
    sb.append('"');
  }
}
