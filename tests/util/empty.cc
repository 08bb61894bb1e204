// empty.cc — keeps the test utility library non-empty.
