//! Convolution, pooling and interpolation.
