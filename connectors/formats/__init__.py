"""Record formats: the JSON and Avro codecs, JSON Lines files, and the rejection vocabulary they share."""
