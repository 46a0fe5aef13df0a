package javax.annotation;

/** Stand-in for JSR-305's Nullable. */
public @interface Nullable {}
