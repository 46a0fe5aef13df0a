package org.apache.flink.util;

/** Stand-in for Flink's Preconditions: the one method the generator uses. */
public final class Preconditions {
  public static <T> T checkNotNull(T ref) {
    if (ref == null) {
      throw new NullPointerException();
    }
    return ref;
  }
}
