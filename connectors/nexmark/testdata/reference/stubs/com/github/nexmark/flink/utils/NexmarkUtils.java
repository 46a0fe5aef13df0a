package com.github.nexmark.flink.utils;

import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.core.JsonProcessingException;

/** Stand-in for the reference's NexmarkUtils: what NexmarkConfiguration and GeneratorConfig use. */
public class NexmarkUtils {
  /** Stand-in for the JSON mapper of NexmarkConfiguration.toString. */
  public static final Mapper MAPPER = new Mapper();

  /** Writes nothing: toString is not used here. */
  public static class Mapper {
    public String writeValueAsString(Object o) throws JsonProcessingException {
      return o.getClass().getName();
    }
  }

  /** Units for rates. */
  public enum RateUnit {
    PER_SECOND,
    PER_MINUTE
  }

  /** Shape of event rate, as the reference's. */
  public enum RateShape {
    SQUARE,
    SINE;

    public int stepLengthSec(int ratePeriodSec) {
      int n = this == SQUARE ? 2 : 10;
      return (ratePeriodSec + n - 1) / n;
    }
  }
}
