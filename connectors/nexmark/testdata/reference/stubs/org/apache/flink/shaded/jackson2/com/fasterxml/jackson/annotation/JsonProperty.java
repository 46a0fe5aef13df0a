package org.apache.flink.shaded.jackson2.com.fasterxml.jackson.annotation;

/** Stand-in for Jackson's JsonProperty. */
public @interface JsonProperty {}
