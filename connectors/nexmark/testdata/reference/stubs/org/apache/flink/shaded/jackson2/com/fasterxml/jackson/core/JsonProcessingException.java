package org.apache.flink.shaded.jackson2.com.fasterxml.jackson.core;

/** Stand-in for Jackson's JsonProcessingException. */
public class JsonProcessingException extends Exception {}
